package epoch

import "math"

// Closed is an epoch handed to the sink.
type Closed[T any] struct {
	Epoch int64
	Value T
	// Late counts packets that reached the window after their epoch had
	// closed, since the previous Closed was handed out. They are not in
	// any value: the count is how a report says they were not seen.
	Late uint64
}

// Window keeps the open epochs of one stream of packets and closes them in
// order. It is not safe for concurrent use: the goroutine that feeds packets
// also calls Advance and Flush. The sink runs on that goroutine and should
// return quickly.
//
// At most Grace/Length + 1 epochs are open at any time, whatever the
// timestamps, so memory is bounded.
type Window[T any] struct {
	cfg      Config
	newValue func(e int64) T
	sink     func(Closed[T])

	open      []slot[T] // ascending by epoch
	watermark int64     // highest time seen, ns since the Unix epoch
	started   bool
	closed    bool   // some epoch has closed
	closedTo  int64  // the last epoch closed; epochs close in order
	late      uint64 // since the last close
	lateTotal uint64

	// The epoch of the last Get, to skip the division for the next packet
	// of the same epoch, and the earliest time an open epoch closes.
	lastE              int64
	lastStart, lastEnd int64
	lastV              T
	haveLast           bool
	nextClose          int64
}

type slot[T any] struct {
	e int64
	v T
}

// NewWindow returns a Window on the grid cfg. newValue makes the value of a
// new epoch; sink receives each epoch when it closes.
func NewWindow[T any](cfg Config, newValue func(e int64) T, sink func(Closed[T])) (*Window[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Window[T]{cfg: cfg, newValue: newValue, sink: sink}, nil
}

// Config returns the window's grid.
func (w *Window[T]) Config() Config { return w.cfg }

// Get returns the value of the epoch that holds tsNS and the offset of tsNS
// within it, creating the epoch if needed. Time advances to tsNS first, which
// may close older epochs. ok is false when the epoch has already closed:
// the packet is counted as late.
func (w *Window[T]) Get(tsNS int64) (v T, offsetNS int64, ok bool) {
	// Fast path: the same epoch as the previous packet, and no epoch due
	// to close.
	if w.haveLast && tsNS >= w.lastStart && tsNS < w.lastEnd && (tsNS <= w.watermark || tsNS < w.nextClose) {
		if tsNS > w.watermark {
			w.watermark = tsNS
		}
		return w.lastV, tsNS - w.lastStart, true
	}
	e, off := w.cfg.Of(tsNS)
	w.Advance(tsNS)
	if w.cfg.EndNS(e)+int64(w.cfg.Grace) <= w.watermark || (w.closed && e <= w.closedTo) {
		w.late++
		w.lateTotal++
		return v, 0, false
	}
	i := 0
	for i < len(w.open) && w.open[i].e < e {
		i++
	}
	if i == len(w.open) || w.open[i].e != e {
		s := slot[T]{e: e, v: w.newValue(e)}
		w.open = append(w.open, slot[T]{})
		copy(w.open[i+1:], w.open[i:])
		w.open[i] = s
		w.updateNextClose()
	}
	v = w.open[i].v
	w.lastE, w.lastStart, w.lastEnd, w.lastV, w.haveLast = e, w.cfg.StartNS(e), w.cfg.EndNS(e), v, true
	return v, off, true
}

// updateNextClose recomputes the earliest time an open epoch closes.
func (w *Window[T]) updateNextClose() {
	if len(w.open) == 0 {
		w.nextClose = math.MaxInt64
		return
	}
	w.nextClose = w.cfg.EndNS(w.open[0].e) + int64(w.cfg.Grace)
}

// Advance moves time to nowNS (if it is later than any time seen) and closes
// every epoch whose end plus grace has passed.
func (w *Window[T]) Advance(nowNS int64) {
	if !w.started || nowNS > w.watermark {
		w.watermark, w.started = nowNS, true
	}
	n := 0
	for n < len(w.open) && w.cfg.EndNS(w.open[n].e)+int64(w.cfg.Grace) <= w.watermark {
		n++
	}
	w.closeFirst(n)
}

// Flush closes every open epoch, as at the end of a capture file.
func (w *Window[T]) Flush() { w.closeFirst(len(w.open)) }

// Open is the number of open epochs.
func (w *Window[T]) Open() int { return len(w.open) }

// LateTotal is the number of late packets since the window was made.
func (w *Window[T]) LateTotal() uint64 { return w.lateTotal }

func (w *Window[T]) closeFirst(n int) {
	if n == 0 {
		return
	}
	w.haveLast = false
	var zero T
	w.lastV = zero
	defer w.updateNextClose()
	for i := 0; i < n; i++ {
		s := w.open[i]
		w.sink(Closed[T]{Epoch: s.e, Value: s.v, Late: w.late})
		w.late = 0
		w.closed, w.closedTo = true, s.e
	}
	rest := copy(w.open, w.open[n:])
	clear(w.open[rest:])
	w.open = w.open[:rest]
}
