package ptp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	fbptp "github.com/facebook/time/ptp/protocol"
	sptp "github.com/facebook/time/ptp/sptp/client"
	"github.com/facebook/time/timestamp"
	"golang.org/x/sys/unix"
)

// Client is a built-in SPTP client: every interval it sends a unicast
// DELAY_REQ to the grandmaster and gets back a SYNC carrying T4 (when the
// grandmaster received the request) and an ANNOUNCE carrying T1 (when it
// sent the SYNC), the exchange facebook/time's sptp and ptp4u speak. With
// T3 (our send time) and T2 (our receive time), from the socket's software
// or hardware timestamps:
//
//	offset = ((T2 − T1) − (T4 − T3)) / 2, delay = ((T2 − T1) + (T4 − T3)) / 2
//
// minus the correction fields. Whatever the asymmetry of the path, the true
// offset lies within ±delay of a measurement, which is the measurement's
// bound. The requests carry a port number above 10, so ptp4u answers on the
// client's own ephemeral port: the client needs no privileged port and runs
// beside ptp4l or sptp on the same host.
type Client struct {
	tracker
	server   netip.Addr
	serverSA unix.Sockaddr
	conn     *sptp.UDPConnTS
	req      *fbptp.SyncDelayReq
	reqBuf   []byte
	seq      uint16
	timeout  time.Duration
	replies  chan reply
}

// reply is one message of an exchange.
type reply struct {
	seq      uint16
	announce bool
	// SYNC: our receive time T2, the grandmaster's receive time T4 and
	// the correction field.
	t2, t4 time.Time
	cf1    time.Duration
	// ANNOUNCE: the grandmaster's send time T1 of the SYNC, the DELAY_REQ's
	// correction field, the UTC offset when the grandmaster runs on the
	// PTP (TAI) time scale.
	t1        time.Time
	cf2       time.Duration
	utcOffset time.Duration
	gm        fbptp.ClockIdentity
}

// readTimeout bounds each blocking read, so that Run sees its context end.
const readTimeout = 100 * time.Millisecond

// NewClient opens the client's socket towards cfg.Server.
func NewClient(cfg Config) (*Client, error) {
	host, port := cfg.Server, fbptp.PortEvent
	if h, p, err := net.SplitHostPort(cfg.Server); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("grandmaster %q: bad port %q", cfg.Server, p)
		}
		host, port = h, int(n)
	}
	server, err := sptp.LookupNetIP(host)
	if err != nil {
		return nil, fmt.Errorf("resolving grandmaster %q: %w", cfg.Server, err)
	}
	server = server.Unmap()
	iface, err := interfaceFor(cfg.Interface, server)
	if err != nil {
		return nil, err
	}
	ts := timestamp.SW
	if cfg.Timestamping == "hw" {
		ts = timestamp.HW
	}
	listen := net.IPv6unspecified
	if server.Is4() {
		listen = net.IPv4zero
	}
	conn, err := sptp.NewUDPConnTS(listen, 0, ts, iface, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the PTP socket on %s: %w", iface.Name, err)
	}
	tv := unix.NsecToTimeval(int64(readTimeout))
	if err := unix.SetsockoptTimeval(conn.ConnFd(), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		conn.Close()
		return nil, fmt.Errorf("setting the PTP socket's read timeout: %w", err)
	}
	cid, err := fbptp.NewClockIdentity(iface.HardwareAddr)
	if err != nil {
		// Interfaces without a MAC (loopback, tunnels): any identity
		// unique enough for the grandmaster to tell clients apart.
		var b [8]byte
		rand.Read(b[:])
		cid = fbptp.ClockIdentity(binary.BigEndian.Uint64(b[:]))
	}
	var pb [2]byte
	rand.Read(pb[:])
	// Port numbers above 10 make ptp4u answer on the request's own port.
	portID := 11 + binary.BigEndian.Uint16(pb[:])%60000
	req := sptp.ReqDelay(cid, portID)
	c := &Client{
		tracker:  newTracker(cfg, "ptp", server.String()),
		server:   server,
		serverSA: timestamp.AddrToSockaddr(server, port),
		conn:     conn,
		req:      req,
		reqBuf:   make([]byte, binary.Size(fbptp.Header{})+binary.Size(fbptp.SyncDelayReqBody{})+binary.Size(fbptp.AlternateResponsePortTLV{})+fbptp.TrailingBytes),
		seq:      binary.BigEndian.Uint16(pb[:]),
		timeout:  min(cfg.Interval/2, time.Second),
		replies:  make(chan reply, 16),
	}
	c.start()
	return c, nil
}

// interfaceFor returns the named interface, or the one whose address the
// kernel would send from to reach server.
func interfaceFor(name string, server netip.Addr) (*net.Interface, error) {
	if name != "" {
		iface, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("PTP interface %q: %w", name, err)
		}
		return iface, nil
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(server, uint16(fbptp.PortEvent))))
	if err != nil {
		return nil, fmt.Errorf("no route to grandmaster %v: %w", server, err)
	}
	local := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	c.Close()
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	for i := range ifaces {
		addrs, err := ifaces[i].Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == local {
				return &ifaces[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface holds %v, the address towards grandmaster %v; set the PTP interface", local, server)
}

// Run exchanges with the grandmaster every interval until ctx ends.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	readErr := make(chan error, 1)
	go func() { readErr <- c.read(ctx) }()
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if err := c.exchange(ctx); err != nil {
			c.missed(c.local(c.now().UnixNano()), err)
		}
		select {
		case <-ctx.Done():
			cancel()
			<-readErr
			return nil
		case err := <-readErr:
			if err == nil || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading from grandmaster %v: %w", c.server, err)
		case <-t.C:
		}
	}
}

// read receives the grandmaster's messages until ctx ends.
func (c *Client) read(ctx context.Context) error {
	buf := make([]byte, timestamp.PayloadSizeBytes)
	oob := make([]byte, timestamp.ControlSizeBytes)
	var sync fbptp.SyncDelayReq
	var ann fbptp.Announce
	for ctx.Err() == nil {
		n, sa, rx, err := c.conn.ReadPacketWithRXTimestampBuf(buf, oob)
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EBADF):
			return err
		case err != nil:
			continue // a packet without a timestamp
		}
		if sa == nil || timestamp.SockaddrToAddr(sa).Unmap() != c.server {
			continue
		}
		mt, err := fbptp.ProbeMsgType(buf[:n])
		if err != nil {
			continue
		}
		var r reply
		switch mt {
		case fbptp.MessageSync:
			if err := fbptp.FromBytes(buf[:n], &sync); err != nil {
				continue
			}
			r = reply{seq: sync.SequenceID, t2: rx, t4: sync.OriginTimestamp.Time(), cf1: sync.CorrectionField.Duration()}
		case fbptp.MessageAnnounce:
			if err := fbptp.FromBytes(buf[:n], &ann); err != nil {
				continue
			}
			r = reply{seq: ann.SequenceID, announce: true, t1: ann.OriginTimestamp.Time(), cf2: ann.CorrectionField.Duration(), gm: ann.GrandmasterIdentity}
			if ann.FlagField&fbptp.FlagPTPTimescale != 0 {
				r.utcOffset = time.Duration(ann.CurrentUTCOffset) * time.Second
			}
		default:
			continue
		}
		select {
		case c.replies <- r:
		default: // the exchange loop is behind; it will time out
		}
	}
	return nil
}

// exchange runs one DELAY_REQ → SYNC + ANNOUNCE exchange and feeds the
// measurement to the tracker.
func (c *Client) exchange(ctx context.Context) error {
	seq := c.seq
	c.seq++
	c.req.SetSequence(seq)
	if _, err := fbptp.BytesTo(c.req, c.reqBuf); err != nil {
		return fmt.Errorf("encoding DELAY_REQ: %w", err)
	}
	t3, err := c.conn.WriteToWithTS(c.reqBuf, c.serverSA, seq)
	if err != nil {
		return fmt.Errorf("sending DELAY_REQ to %v: %w", c.server, err)
	}
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	var sync, ann *reply
	for sync == nil || ann == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("no answer from grandmaster %v within %v", c.server, c.timeout)
		case r := <-c.replies:
			if r.seq != seq {
				continue // a late answer to an earlier request
			}
			if r.announce {
				ann = &r
			} else {
				sync = &r
			}
		}
	}
	m := measure(t3, sync.t2, sync.t4, ann.t1, sync.cf1, ann.cf2, ann.utcOffset, c.faultNS)
	if m.delayNS < 0 {
		return fmt.Errorf("exchange %d with %v gave a negative path delay (%v): timestamps out of order", seq, c.server, time.Duration(m.delayNS))
	}
	c.reference = fmt.Sprintf("%v (gm %v)", c.server, ann.gm)
	c.measured(sample{atNS: m.atNS, offsetNS: m.offsetNS, boundNS: m.delayNS}, m.delayNS)
	return nil
}

// measurement is one exchange's result, in local time.
type measurement struct {
	atNS, offsetNS, delayNS int64
}

// measure computes offset (local − reference) and mean path delay of one
// exchange. t2 and t3 are local system-clock timestamps, to which the
// artificial fault is added; t1 and t4 are the grandmaster's, on the UTC
// scale once utcOffset is taken off.
func measure(t3, t2, t4, t1 time.Time, cf1, cf2, utcOffset time.Duration, faultNS int64) measurement {
	l2 := t2.UnixNano() + faultNS
	l3 := t3.UnixNano() + faultNS
	r1 := t1.UnixNano() - int64(utcOffset)
	r4 := t4.UnixNano() - int64(utcOffset)
	s2c := l2 - r1 - int64(cf1)
	c2s := r4 - l3 - int64(cf2)
	return measurement{atNS: l2, offsetNS: (s2c - c2s) / 2, delayNS: (s2c + c2s) / 2}
}
