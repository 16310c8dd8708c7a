package capture

import (
	"encoding/binary"
	"errors"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Decoding layers gopacket lacks (or decodes more than identity needs),
// plugged into the same DecodingLayerParser.

// LayerTypeERSPANIII is ERSPAN type III (GRE protocol 0x22eb), which
// gopacket does not know; registering it teaches gopacket's GRE decoder to
// name it.
var LayerTypeERSPANIII = gopacket.RegisterLayerType(2361, gopacket.LayerTypeMetadata{Name: "ERSPANIII", Decoder: gopacket.DecodeFunc(decodeUnsupported)})

// ethernetTypeERSPANIII is the GRE protocol type of ERSPAN type III.
const ethernetTypeERSPANIII layers.EthernetType = 0x22eb

func init() {
	layers.EthernetTypeMetadata[ethernetTypeERSPANIII] = layers.EnumMetadata{DecodeWith: gopacket.DecodeFunc(decodeUnsupported), Name: "ERSPANIII", LayerType: LayerTypeERSPANIII}
}

func decodeUnsupported([]byte, gopacket.PacketBuilder) error {
	return errors.New("owl decodes this layer only with its DecodingLayerParser")
}

var errShort = errors.New("header truncated")

// mplsStack decodes a whole MPLS label stack (RFC 3032) and guesses what it
// carries from the first nibble after it: 4 IPv4, 6 IPv6, 0 a pseudowire
// control word (RFC 4385) before an Ethernet frame; otherwise Ethernet.
type mplsStack struct {
	layers.BaseLayer
	next gopacket.LayerType
}

func (m *mplsStack) CanDecode() gopacket.LayerClass { return layers.LayerTypeMPLS }

func (m *mplsStack) NextLayerType() gopacket.LayerType { return m.next }

func (m *mplsStack) LayerType() gopacket.LayerType { return layers.LayerTypeMPLS }

func (m *mplsStack) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	off := 0
	for {
		if len(data) < off+4 {
			df.SetTruncated()
			return errShort
		}
		bottom := data[off+2]&1 == 1
		off += 4
		if bottom {
			break
		}
		if off > 4*32 {
			return errors.New("MPLS label stack deeper than 32")
		}
	}
	if len(data) <= off {
		df.SetTruncated()
		return errShort
	}
	switch data[off] >> 4 {
	case 4:
		m.next = layers.LayerTypeIPv4
	case 6:
		m.next = layers.LayerTypeIPv6
	case 0:
		off += 4 // control word
		m.next = layers.LayerTypeEthernet
	default:
		m.next = layers.LayerTypeEthernet
	}
	if len(data) < off {
		df.SetTruncated()
		return errShort
	}
	m.BaseLayer = layers.BaseLayer{Contents: data[:off], Payload: data[off:]}
	return nil
}

// erspan3 decodes an ERSPAN type III header: 12 bytes, and an 8-byte
// platform-specific subheader when its O flag is set; an Ethernet frame follows.
type erspan3 struct {
	layers.BaseLayer
}

func (e *erspan3) CanDecode() gopacket.LayerClass    { return LayerTypeERSPANIII }
func (e *erspan3) NextLayerType() gopacket.LayerType { return layers.LayerTypeEthernet }
func (e *erspan3) LayerType() gopacket.LayerType     { return LayerTypeERSPANIII }

func (e *erspan3) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < 12 {
		df.SetTruncated()
		return errShort
	}
	if data[0]>>4 != 2 {
		return errors.New("ERSPAN III header with a version other than 2")
	}
	n := 12
	if data[11]&1 == 1 { // O: optional subheader
		n += 8
	}
	if len(data) < n {
		df.SetTruncated()
		return errShort
	}
	e.BaseLayer = layers.BaseLayer{Contents: data[:n], Payload: data[n:]}
	return nil
}

// tcpHeader decodes only what identity needs of a TCP header: ports and
// where the header ends. gopacket's TCP layer also parses options, which
// costs a quarter of the decode time and is of no use here.
type tcpHeader struct {
	layers.BaseLayer
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	Flags            uint8
}

func (t *tcpHeader) CanDecode() gopacket.LayerClass    { return layers.LayerTypeTCP }
func (t *tcpHeader) NextLayerType() gopacket.LayerType { return gopacket.LayerTypeZero }
func (t *tcpHeader) LayerType() gopacket.LayerType     { return layers.LayerTypeTCP }

func (t *tcpHeader) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < 20 {
		df.SetTruncated()
		return errShort
	}
	n := int(data[12]>>4) * 4
	if n < 20 {
		return errors.New("TCP data offset below 5")
	}
	if len(data) < n {
		df.SetTruncated()
		return errShort
	}
	t.SrcPort, t.DstPort = binary.BigEndian.Uint16(data), binary.BigEndian.Uint16(data[2:])
	t.Seq, t.Ack, t.Flags = binary.BigEndian.Uint32(data[4:]), binary.BigEndian.Uint32(data[8:]), data[13]
	t.BaseLayer = layers.BaseLayer{Contents: data[:n], Payload: data[n:]}
	return nil
}
