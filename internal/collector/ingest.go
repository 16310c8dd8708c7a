package collector

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/security"
	"github.com/owl-latency/owl/internal/store"
)

// maxTopFlows bounds the top flows one report may name.
const maxTopFlows = 100_000

// probeService serves ProbeService: the probes' streams in.
type probeService struct {
	owlv1.UnimplementedProbeServiceServer
	c *Collector
}

// Connect handles one probe stream: Hello, then reports, each acknowledged
// once stored. Messages are received and handled in order on a goroutine
// of the stream's, and what is queued for the probe is sent on another
// (session.serve).
func (s probeService) Connect(stream owlv1.ProbeService_ConnectServer) error {
	c := s.c
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHello()
	if h == nil {
		return status.Error(codes.InvalidArgument, "the first message of a stream must be a Hello")
	}
	addr := ""
	if p, ok := peer.FromContext(stream.Context()); ok {
		addr = p.Addr.String()
	}
	sess := newSession(h.GetProbeId(), stream, c.pathsOf(h.GetProbeId()))
	sess.pauses = h.GetPauses()
	defer close(sess.done)
	if reason := c.gate.probeIDRefused(stream.Context(), h.GetProbeId()); reason != "" {
		id, _ := security.FromContext(stream.Context())
		c.probes.refuse(id.Name, reason) // counted on the probe the certificate names
		c.log.Warn("refusing probe stream: its certificate names another probe", "addr", addr, "reason", reason)
		_ = stream.Send(rejectMessage(owlv1.Reject_KIND_PROBE, "", reason))
		return nil
	}
	err = c.probes.hello(h, addr, via(stream.Context()))
	var rej *rejection
	if errors.As(err, &rej) {
		_ = stream.Send(rejectMessage(owlv1.Reject_KIND_PROBE, "", rej.reason))
		return nil
	}
	if errors.Is(err, errTooManyStreams) {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer c.probes.goodbye(sess)
	if err := c.openSession(sess); err != nil {
		return err
	}
	c.releaseStored(sess.probe, h.GetUnreleased())
	received := make(chan error, 1)
	go c.receive(sess, received)
	return sess.serve(received)
}

// reportsInFlight bounds the reports of one stream being checked and
// stored at once. Their store writes share commits (one fsync for many),
// repair replies behind them are not held up, and a stream with as many
// waiting is not read further: the probe is slowed down.
const reportsInFlight = 64

// receive handles a probe's messages until the stream or a message fails;
// the first error goes to received. Reports are handled on goroutines of
// their own, at most reportsInFlight at once and max_message_bytes of
// synopses (each is acknowledged on its own). The probe's reports and
// COLATE vectors together are read at most limits.reports_per_second a
// second. Past any of these the stream is read on later. The other
// messages are handled in order. A message whose handling panics (a
// damaged store) ends its stream, not the collector.
func (c *Collector) receive(sess *session, received chan<- error) {
	fail := func(err error) {
		select {
		case received <- err:
		default: // the stream ends on the first error
		}
	}
	inflight := make(chan struct{}, reportsInFlight)
	inflightBytes := semaphore.NewWeighted(int64(c.cfg.MaxMessageBytes))
	var wg sync.WaitGroup
	defer wg.Wait()
	lim := c.probes.limiter(sess.probe)
	for {
		m, err := sess.stream.Recv()
		if err != nil {
			fail(err)
			return
		}
		if m.GetReport() != nil || m.GetColate() != nil || m.GetRtt() != nil || m.GetReorder() != nil {
			if err := c.pace(sess.stream.Context(), sess.probe, lim); err != nil {
				fail(err)
				return
			}
		}
		if r := m.GetReport(); r != nil {
			size := min(int64(len(r.GetLda())+len(r.GetRda())+len(r.GetLds())+len(r.GetList())), int64(c.cfg.MaxMessageBytes))
			if err := inflightBytes.Acquire(sess.stream.Context(), size); err != nil {
				fail(err)
				return
			}
			inflight <- struct{}{}
			wg.Go(func() {
				var unsaved *saveWait
				c.guard(sess, fail, func() error {
					var err error
					if unsaved, err = c.reportReplicated(sess, r); unsaved != nil {
						return nil // answered below
					}
					return c.answer(sess, owlv1.Reject_KIND_REPORT, r.GetPath(), r.GetEpoch(), r.GetSeq(), err)
				})
				<-inflight
				inflightBytes.Release(size)
				if unsaved == nil {
					return
				}
				select {
				case <-unsaved.done:
				case <-sess.stream.Context().Done():
					return // not acknowledged: the probe sends it again
				}
				c.guard(sess, fail, func() error {
					return c.answer(sess, owlv1.Reject_KIND_REPORT, r.GetPath(), r.GetEpoch(), r.GetSeq(), unsaved.err)
				})
			})
			continue
		}
		if !c.guard(sess, fail, func() error { return c.handle(sess, m) }) {
			return
		}
	}
}

// guard runs the handling of a message; an error, or a panic, goes to
// fail. It says whether the handling succeeded.
func (c *Collector) guard(sess *session, fail func(error), handle func() error) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("handling a probe's message failed with a panic; its stream ends", "probe", sess.probe, "panic", p, "stack", string(debug.Stack()))
			fail(status.Errorf(codes.Internal, "the collector failed on a message: %v", p))
			ok = false
		}
	}()
	if err := handle(); err != nil {
		fail(err)
		return false
	}
	return true
}

// openSession sends a new stream its path configuration and makes it the
// probe's stream for requests.
func (c *Collector) openSession(sess *session) error {
	gen := c.pathsGen.Load()
	if err := c.sendPaths(sess); err != nil {
		return err
	}
	c.probes.addSession(sess)
	if c.pathsGen.Load() != gen {
		// The members changed meanwhile: this stream missed the resend.
		return c.sendPaths(sess)
	}
	return nil
}

// maxHelloUnreleased bounds the epochs of a Hello looked up.
const maxHelloUnreleased = 4096

// releaseStored releases the epochs a probe lists in its Hello as
// unreleased whose complete result this collector stores and that wait
// for nothing more here: it stored the result and acknowledged the
// reports, then stopped before it released the epochs, and the probe
// does not send acknowledged reports again. An epoch still pending, or
// stored missing a side (the late side may yet come), stays the
// worker's and pairing's to release.
func (c *Collector) releaseStored(probe string, refs []*owlv1.EpochRef) {
	byPath := map[string][]int64{}
	for _, ref := range refs[:min(len(refs), maxHelloUnreleased)] {
		ps := c.paths[ref.GetPath()]
		if ps == nil || (ps.path.Upstream != probe && ps.path.Downstream != probe) {
			continue
		}
		ps.mu.Lock()
		_, pending := ps.pending[ref.GetEpoch()]
		ps.mu.Unlock()
		if pending {
			continue
		}
		res, err := c.store.Result(ref.GetPath(), ref.GetEpoch())
		if err != nil {
			c.log.Warn("reading a result to release its epoch", "path", ref.GetPath(), "epoch", ref.GetEpoch(), "err", err)
			continue
		}
		if res != nil && !missingSide(res) {
			byPath[ref.GetPath()] = append(byPath[ref.GetPath()], ref.GetEpoch())
		}
	}
	for path, epochs := range byPath {
		c.log.Info("releasing epochs whose results were stored before", "probe", probe, "path", path, "epochs", len(epochs))
		c.probes.release(probe, path, epochs...)
	}
}

// handle takes one message of a probe's stream after its Hello, other
// than a report (receive takes those). An error ends the stream.
func (c *Collector) handle(sess *session, m *owlv1.ProbeMessage) error {
	switch a := m.GetMsg().(type) {
	case *owlv1.ProbeMessage_FetchReply:
		sess.deliver(a.FetchReply.GetRequestId(), m)
		return nil
	case *owlv1.ProbeMessage_RebuildReply:
		sess.deliver(a.RebuildReply.GetRequestId(), m)
		return nil
	case *owlv1.ProbeMessage_Clock:
		c.probes.clockUpdate(sess.probe, a.Clock)
		return nil
	case *owlv1.ProbeMessage_Colate:
		err := c.takeColate(sess.probe, a.Colate)
		return c.answer(sess, owlv1.Reject_KIND_COLATE, "", a.Colate.GetEpoch(), a.Colate.GetSeq(), err)
	case *owlv1.ProbeMessage_Rtt:
		err := c.takeRTT(sess.probe, a.Rtt)
		return c.answer(sess, owlv1.Reject_KIND_RTT, "", a.Rtt.GetEpoch(), a.Rtt.GetSeq(), err)
	case *owlv1.ProbeMessage_Reorder:
		err := c.takeReorder(sess.probe, a.Reorder)
		return c.answer(sess, owlv1.Reject_KIND_REORDER, "", a.Reorder.GetEpoch(), a.Reorder.GetSeq(), err)
	case *owlv1.ProbeMessage_SourcesDone:
		c.probes.markSourcesDone(sess.probe)
		c.log.Info("probe's capture files are done: its paths' lone sides stop waiting for it", "probe", sess.probe)
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "unexpected %T after Hello", m.GetMsg())
}

// answer tells the probe what became of a report or COLATE vector: an
// acknowledgement once stored, or a rejection that can never be undone
// (also acknowledged), or a refusal naming the owner in a cluster (not
// acknowledged: the probe sends it there). A failure of the collector
// ends the stream unacknowledged: the probe keeps the message and sends
// it again.
func (c *Collector) answer(sess *session, kind owlv1.Reject_Kind, path string, epoch int64, seq uint64, err error) error {
	var no *notOwner
	var rej *rejection
	switch {
	case errors.As(err, &no):
		return sess.send(notOwnerReject(kind, path, no))
	case errors.As(err, &rej):
		c.log.Warn("probe message rejected", "probe", sess.probe, "kind", kind, "path", path, "epoch", epoch, "reason", rej.reason)
		c.probes.refuse(sess.probe, rej.reason)
		if err := sess.send(rejectMessage(kind, path, rej.reason)); err != nil {
			return err
		}
	case errors.Is(err, errBusy), errors.Is(err, errProbeShare):
		return status.Error(codes.ResourceExhausted, err.Error())
	case err != nil:
		c.log.Error("handling probe message", "probe", sess.probe, "kind", kind, "path", path, "epoch", epoch, "err", err)
		return status.Error(codes.Unavailable, err.Error())
	}
	ack := &owlv1.Ack{Seq: seq, Path: path, Epoch: epoch}
	return sess.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Ack{Ack: ack}})
}

// rejectMessage tells a probe that something it sent can never be used.
func rejectMessage(kind owlv1.Reject_Kind, path, reason string) *owlv1.CollectorMessage {
	return &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Reject{Reject: &owlv1.Reject{Kind: kind, Path: path, Reason: reason}}}
}

// notOwnerReject tells a probe where a report or vector goes.
func notOwnerReject(kind owlv1.Reject_Kind, path string, no *notOwner) *owlv1.CollectorMessage {
	m := rejectMessage(kind, path, no.Error())
	m.GetReject().Owner = no.owner.GRPC
	return m
}

// sendPaths sends a probe's stream its path configuration as it is now.
// The configuration is made and sent under the session's own lock, so
// that of two sends racing (a new stream, a change of the cluster's
// members), the newer configuration arrives last.
func (c *Collector) sendPaths(sess *session) error {
	sess.pathsMu.Lock()
	defer sess.pathsMu.Unlock()
	return sess.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Paths{Paths: c.pathConfig(sess.probe)}})
}

// accepts are the kinds of probe messages this collector takes.
var accepts = []owlv1.Reject_Kind{owlv1.Reject_KIND_REPORT, owlv1.Reject_KIND_COLATE, owlv1.Reject_KIND_RTT, owlv1.Reject_KIND_REORDER}

// pathsOf counts the configured paths probe id is on.
func (c *Collector) pathsOf(id string) int {
	n := 0
	for _, p := range c.pathList {
		if id == p.Upstream || id == p.Downstream {
			n++
		}
	}
	return n
}

// pathConfig is the configuration of a probe's paths: its role on each,
// the RDA size to start with, and in a cluster which collector takes the
// reports (the size comes from the owner only, whose late binding sets it).
func (c *Collector) pathConfig(id string) *owlv1.PathConfig {
	pc := &owlv1.PathConfig{Params: c.cfg.Params.ToProto(), Accepts: accepts, LdsDigestBytes: uint32(c.cfg.Flows.LDSDigestBytes), LdsPacked: c.cfg.Flows.LDSPacked, PackedFlowKeys: true, TakesSourcesDone: true,
		SampleKeyBits: uint32(c.cfg.SampleKeyBits)}
	if c.cl != nil {
		pc.ColateCollector = c.cl.Owner(colateKey).GRPC
	}
	for _, p := range c.pathList {
		role := owlv1.Role_ROLE_UNSPECIFIED
		switch id {
		case p.Upstream:
			role = owlv1.Role_ROLE_UPSTREAM
		case p.Downstream:
			role = owlv1.Role_ROLE_DOWNSTREAM
		}
		if role == owlv1.Role_ROLE_UNSPECIFIED {
			continue
		}
		a := &owlv1.PathAssignment{NotOwner: true} // the owner's sizes are its to give
		owner, self := c.owner(p.Name)
		if self {
			st := c.paths[p.Name]
			st.mu.Lock()
			a = st.sizes()
			st.mu.Unlock()
		}
		a.Path, a.Role, a.Collector = p.ToProto(), role, owner.GRPC
		pc.Paths = append(pc.Paths, a)
	}
	return pc
}

// takeColate stores a probe's COLATE vector, unless another collector of
// the cluster owns the vectors.
func (c *Collector) takeColate(probe string, v *owlv1.ColateVector) error {
	if owner, self := c.owner(colateKey); !self {
		c.m.rejected.WithLabelValues("not_owner").Inc()
		return &notOwner{key: colateKey, owner: owner}
	}
	if err := c.checkEpoch(probe, epochOf{kind: "COLATE vector of"}, v.GetEpoch()); err != nil {
		return err
	}
	return c.colates.put(probe, v)
}

// report takes one epoch report of a probe. A nil error means the report is
// stored (or was already used) and may be acknowledged. A *rejection means
// it can never be used; a *notOwner that another collector takes it.
// Other errors are failures of the collector.
func (c *Collector) report(probe string, r *owlv1.EpochReport) error {
	_, _, err := c.takeReport(probe, r, false, false, 1)
	return err
}

// reportReplicated takes a report of a probe's stream like report, and in
// a cluster returns once its copy is with the path's replica (or was
// given up, or the stream ended): a report is acknowledged only when the
// owner's death alone would not lose it. A side placed without being
// stored (its other side was in) returns its wait instead: it is
// acknowledged once that ends.
func (c *Collector) reportReplicated(sess *session, r *owlv1.EpochReport) (*saveWait, error) {
	copied, unsaved, err := c.takeReport(sess.probe, r, c.cfg.WriteLoneAfter > 0, sess.pauses, c.shedSlack(sess))
	if err == nil {
		c.pauseIfBehind(sess, r.GetPath(), r.GetEpoch())
	}
	if err == nil && copied != nil {
		select {
		case <-copied:
		case <-sess.stream.Context().Done():
		}
	}
	return unsaved, err
}

// takeReport is report, and what pairSide returns; unsaved lets a side
// whose other side is in be placed without a store write (its probe
// waits for the result). A report is turned away past slack times the
// backlog's bound (shedSlack). A probe that pauses is paused past the
// bound, or its share of it, rather than turned away for its share:
// that could leave two probes each waiting for the other's reports.
func (c *Collector) takeReport(probe string, r *owlv1.EpochReport, unsaved, pauses bool, slack float64) (<-chan struct{}, *saveWait, error) {
	c.probes.sawReport(probe)
	ps, err := c.checkReport(probe, r)
	if err != nil {
		return nil, nil, err
	}
	// Before decoding: a report turned away costs no more.
	if c.overBacklog(probe, slack) {
		return nil, nil, errBusy
	}
	if !pauses && c.overShare(probe, 1) {
		return nil, nil, errProbeShare
	}
	s, err := c.decodeReport(probe, r)
	if err != nil {
		return nil, nil, err
	}
	// Counted now, so that a burst of reports meets the bound before
	// measureBacklog counts the tables again.
	c.pendingBytes.Add(int64(s.bytes()))
	c.m.pathSeries.add(r.GetPath(), pmReportBytes, float64(len(r.GetLda())+len(r.GetRda())+len(r.GetLds())+len(r.GetList())))
	return c.pairSide(ps, s, unsaved)
}

// checkReport checks that a report belongs here and can be used, from
// what it says and its synopses' headers.
func (c *Collector) checkReport(probe string, r *owlv1.EpochReport) (*pathState, error) {
	ps := c.paths[r.GetPath()]
	if ps == nil {
		c.m.rejected.WithLabelValues("unknown_path").Inc()
		return nil, &rejection{fmt.Sprintf("path %q is not configured", r.GetPath())}
	}
	if owner, self := c.owner(r.GetPath()); !self {
		c.m.rejected.WithLabelValues("not_owner").Inc()
		return nil, &notOwner{key: r.GetPath(), owner: owner}
	}
	want := ps.path.Upstream
	if r.GetRole() == owlv1.Role_ROLE_DOWNSTREAM {
		want = ps.path.Downstream
	} else if r.GetRole() != owlv1.Role_ROLE_UPSTREAM {
		c.m.rejected.WithLabelValues("bad_role").Inc()
		return nil, &rejection{fmt.Sprintf("path %q: report without a role", r.GetPath())}
	}
	if probe != want {
		c.m.rejected.WithLabelValues("bad_role").Inc()
		return nil, &rejection{fmt.Sprintf("path %q: %s is not its %s", r.GetPath(), probe, roleName(r.GetRole()))}
	}
	if err := c.checkEpoch(probe, epochOf{path: r.GetPath()}, r.GetEpoch()); err != nil {
		return nil, err
	}
	if err := c.checkShapes(probe, r); err != nil {
		return nil, err
	}
	return ps, nil
}

// decodeReport decodes a checked report and checks its synopses against
// the deployment's parameters.
func (c *Collector) decodeReport(probe string, r *owlv1.EpochReport) (*side, error) {
	s, err := decodeSide(store.Pending{Probe: probe, Received: c.now(), Report: r}, c.cfg.Params)
	if err != nil {
		c.m.rejected.WithLabelValues("malformed").Inc()
		return nil, &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	if err := c.compatible(s); err != nil {
		c.m.rejected.WithLabelValues("mismatch").Inc()
		c.m.mismatch.WithLabelValues(probe).Inc()
		return nil, &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	return s, nil
}

// compatible checks a side's synopses against the deployment's parameters.
func (c *Collector) compatible(s *side) error {
	err := c.cfg.Params.LDA.Within(s.lda.Config())
	if err == nil && s.rda != nil {
		err = params.SameRDAHashing(c.cfg.Params.RDA, s.rda.Config())
	}
	if err == nil && s.ldsCfg != nil {
		err = params.SameLDSHashing(c.cfg.Params.LDS, *s.ldsCfg)
	}
	if err == nil && len(s.Report.GetSample()) > 0 { // a list's sample is the collector's own
		err = c.sampleFits(s.sample)
	}
	if n := len(s.Report.GetTopFlows()); err == nil && n > maxTopFlows {
		err = fmt.Errorf("%d top flows exceed %d", n, maxTopFlows)
	}
	return err
}

func roleName(r owlv1.Role) string {
	if r == owlv1.Role_ROLE_DOWNSTREAM {
		return "downstream"
	}
	return "upstream"
}
