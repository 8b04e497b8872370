package transport

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func qmsg(n int, tag byte) Message {
	buf := getBuffer(n)
	if n > 0 {
		buf.b[0] = tag
	}
	return buf.message(ChannelID(tag))
}

// blocked reports whether f is still running after a short while.
func blocked(f func()) (done chan struct{}, isBlocked bool) {
	done = make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
		return done, false
	case <-time.After(50 * time.Millisecond):
		return done, true
	}
}

func TestRecvQueueBoundsAndOrder(t *testing.T) {
	ctx := testCtx(t)
	q := newRecvQueue(2, 1000)
	for i := range 2 {
		if err := q.push(qmsg(10, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Full by count: the third producer waits.
	done, isBlocked := blocked(func() { q.push(qmsg(10, 2)) })
	if !isBlocked {
		t.Fatal("push into a full queue did not wait")
	}
	for i := range 3 {
		m, err := q.pop(ctx)
		if err != nil || m.Channel != ChannelID(i) {
			t.Fatalf("pop %d: channel %d, %v", i, m.Channel, err)
		}
		m.Release()
	}
	<-done

	// Full by bytes: 600 + 600 > 1000 waits, but a lone large message passes.
	if err := q.push(qmsg(600, 0)); err != nil {
		t.Fatal(err)
	}
	done, isBlocked = blocked(func() { q.push(qmsg(600, 1)) })
	if !isBlocked {
		t.Fatal("push beyond the byte budget did not wait")
	}
	m, _ := q.pop(ctx)
	m.Release()
	<-done
	m, _ = q.pop(ctx)
	m.Release()
	if err := q.push(qmsg(5000, 7)); err != nil {
		t.Fatal("a message larger than the budget was refused on an empty queue")
	}
	m, _ = q.pop(ctx)
	if len(m.Data) != 5000 {
		t.Fatal("large message lost")
	}
	m.Release()
}

func TestRecvQueueFailAfterItems(t *testing.T) {
	ctx := testCtx(t)
	q := newRecvQueue(4, 1000)
	q.push(qmsg(1, 1))
	chanErr := &ChannelError{Channel: 9, Err: ErrProtocol}
	q.pushErr(chanErr)
	boom := errors.New("boom")
	q.fail(boom)
	q.fail(errors.New("second failure is ignored"))
	if err := q.push(qmsg(1, 2)); !errors.Is(err, boom) {
		t.Fatalf("push after fail: %v", err)
	}
	m, err := q.pop(ctx)
	if err != nil || m.Channel != 1 {
		t.Fatalf("first pop: %v %v", m.Channel, err)
	}
	m.Release()
	if _, err := q.pop(ctx); err != chanErr {
		t.Fatalf("second pop: %v, want the channel error", err)
	}
	for range 2 {
		if _, err := q.pop(ctx); !errors.Is(err, boom) {
			t.Fatalf("pop after drain: %v, want the failure", err)
		}
	}
}

func TestRecvQueueCloseWakesEveryone(t *testing.T) {
	q := newRecvQueue(1, 1000)
	q.push(qmsg(1, 1))
	pushDone, isBlocked := blocked(func() {
		if err := q.push(qmsg(1, 2)); !errors.Is(err, ErrClosed) {
			t.Errorf("blocked push: %v, want ErrClosed", err)
		}
	})
	if !isBlocked {
		t.Fatal("push did not block")
	}
	q2 := newRecvQueue(1, 1000)
	popDone, isBlocked := blocked(func() {
		if _, err := q2.pop(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("blocked pop: %v, want ErrClosed", err)
		}
	})
	if !isBlocked {
		t.Fatal("pop on empty queue did not block")
	}
	q.close()
	q2.close()
	<-pushDone
	<-popDone
	if _, err := q.pop(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("pop after close returned the queued item or %v", err)
	}
	q.close() // idempotent
}

func TestRecvQueuePopContext(t *testing.T) {
	q := newRecvQueue(1, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := q.pop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("pop: %v, want deadline", err)
	}
	q.push(qmsg(3, 4))
	m, err := q.pop(testCtx(t))
	if err != nil || m.Channel != 4 {
		t.Fatal("queue unusable after a timed-out pop")
	}
}

func TestRecvQueueManyProducers(t *testing.T) {
	// Producers outnumber the slots; every message must come out, and each
	// producer's messages in its order.
	ctx := testCtx(t)
	q := newRecvQueue(3, 100)
	const producers, each = 8, 200
	for p := range producers {
		go func() {
			for i := range each {
				m := qmsg(2+i%40, byte(p))
				m.Data[1] = byte(i)
				if err := q.push(m); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	next := make([]int, producers)
	for range producers * each {
		m, err := q.pop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := m.Data[0]
		if m.Data[1] != byte(next[p]) {
			t.Fatalf("producer %d: got %d, want %d", p, m.Data[1], byte(next[p]))
		}
		next[p]++
		m.Release()
	}
}

func TestRecvQueueGrowsToBound(t *testing.T) {
	// The ring starts small and doubles on demand, capped at the bound even
	// when the bound is not a power of two; order survives each move,
	// including moves of a ring that has wrapped round.
	for _, bound := range []int{1, 3, initialRecvSlots, 10, 64} {
		t.Run(fmt.Sprintf("bound=%d", bound), func(t *testing.T) {
			ctx := testCtx(t)
			q := newRecvQueue(bound, 1<<20)
			if got, want := len(q.items), min(bound, initialRecvSlots); got != want {
				t.Fatalf("bound %d: starts with %d slots, want %d", bound, got, want)
			}
			next, popped := byte(0), byte(0)
			pop := func() {
				t.Helper()
				m, err := q.pop(ctx)
				if err != nil || m.Data[0] != popped {
					t.Fatalf("bound %d: pop got %v (%v), want %d", bound, m.Data, err, popped)
				}
				popped++
				m.Release()
			}
			// Move head off zero so the first growth copies a wrapped ring.
			q.push(qmsg(1, next))
			next++
			pop()
			for q.n < bound {
				if err := q.push(qmsg(1, next)); err != nil {
					t.Fatal(err)
				}
				next++
				if len(q.items) > bound {
					t.Fatalf("bound %d: ring grew to %d slots", bound, len(q.items))
				}
			}
			if len(q.items) != bound {
				t.Fatalf("bound %d: full queue has %d slots", bound, len(q.items))
			}
			done, isBlocked := blocked(func() { q.push(qmsg(1, next)) })
			if !isBlocked {
				t.Fatalf("bound %d: push into a full grown queue did not wait", bound)
			}
			pop()
			<-done
			next++
			for popped != next {
				pop()
			}
			if len(q.items) != bound {
				t.Fatalf("bound %d: ring changed size to %d once drained", bound, len(q.items))
			}
		})
	}
}

func TestRecvQueueGrowthKeepsByteBound(t *testing.T) {
	// Growing the ring must not loosen the byte budget: with room for many
	// items but not for their bytes, the producer waits.
	ctx := testCtx(t)
	q := newRecvQueue(64, 100)
	for i := range 5 {
		if err := q.push(qmsg(20, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	if len(q.items) <= initialRecvSlots {
		t.Fatalf("ring did not grow past %d slots", initialRecvSlots)
	}
	done, isBlocked := blocked(func() { q.push(qmsg(20, 5)) })
	if !isBlocked {
		t.Fatal("push beyond the byte budget did not wait after growth")
	}
	for i := range 6 {
		m, err := q.pop(ctx)
		if err != nil || m.Data[0] != byte(i) {
			t.Fatalf("pop %d: %v %v", i, m.Data, err)
		}
		m.Release()
		if i == 0 {
			<-done
		}
	}
}

func TestRecvQueueErrorsGrowPastBound(t *testing.T) {
	// Channel errors bypass the bounds; they still come out in order after a
	// full queue, and the messages keep working once the ring has grown past
	// the bound.
	ctx := testCtx(t)
	q := newRecvQueue(2, 1000)
	q.push(qmsg(1, 0))
	q.push(qmsg(1, 1))
	errs := []error{&ChannelError{Channel: 2, Err: ErrProtocol}, &ChannelError{Channel: 3, Err: ErrProtocol}}
	for _, err := range errs {
		q.pushErr(err)
	}
	for i := range 2 {
		m, err := q.pop(ctx)
		if err != nil || m.Data[0] != byte(i) {
			t.Fatalf("pop %d: %v %v", i, m.Data, err)
		}
		m.Release()
	}
	for _, want := range errs {
		if _, err := q.pop(ctx); err != want {
			t.Fatalf("pop: %v, want %v", err, want)
		}
	}
	q.push(qmsg(1, 7))
	if m, err := q.pop(ctx); err != nil || m.Data[0] != 7 {
		t.Fatalf("pop after errors: %v %v", m.Data, err)
	}
}

// BenchmarkRecvQueueBatches: a reader goroutine pushes batches of 4
// messages and a consumer takes them as the daemon's session reader and
// the agents do: a blocking pop, then pops of what is already there until
// one with an ended context finds nothing (bench.receiveBatches). CPU of
// both goroutines per message.
func BenchmarkRecvQueueBatches(b *testing.B) {
	const batch = 4
	q := newRecvQueue(64, 1<<20)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	msg := qmsg(1024, 1)
	taken := make(chan struct{}, 1)
	b.ReportAllocs()
	cpu0 := cpuTime()
	go func() {
		for range b.N {
			for range batch {
				if err := q.push(msg); err != nil {
					return
				}
			}
			<-taken
		}
	}()
	for got := 0; got < b.N*batch; {
		if _, err := q.pop(bg); err != nil {
			b.Fatal(err)
		}
		for got++; got%batch != 0; got++ {
			if _, err := q.pop(ended); err != nil {
				break
			}
		}
		if got%batch == 0 {
			taken <- struct{}{}
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*batch), "cpu-ns/msg")
}
