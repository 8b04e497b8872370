package transport

import (
	"context"
	"errors"
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
