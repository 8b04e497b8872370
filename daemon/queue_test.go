package daemon

import "testing"

// TestSendQueueBoundsMemory: the byte bound is on the memory the queue
// holds. A frame just over 64 KiB sits in a 128 KiB pooled buffer (size
// classes are powers of two), so eight of them fill 1 MiB; counting their
// lengths would let the queue hold twice its bound.
func TestSendQueueBoundsMemory(t *testing.T) {
	q := newSendQueue(1024, 1<<20)
	accepted := 0
	for range 32 {
		m, ok := buildData(4, 0, 1, "peer", make([]byte, 64<<10), 0)
		if !ok {
			t.Fatal("buildData failed")
		}
		if !q.push(m) {
			m.free()
			break
		}
		accepted++
	}
	n, bytes := q.stats()
	if accepted != 8 || n != 8 || bytes != 1<<20 {
		t.Fatalf("accepted %d (queue %d messages, %d bytes), want 8 holding 1 MiB", accepted, n, bytes)
	}
	for _, m := range q.takeAll(nil) {
		m.free()
	}
	if n, bytes := q.stats(); n != 0 || bytes != 0 {
		t.Fatalf("after takeAll: %d messages, %d bytes", n, bytes)
	}
}

// TestSendQueueTakesOneLargeMessage: an empty queue accepts one message
// whatever its size, so a frame larger than the byte bound still goes out.
func TestSendQueueTakesOneLargeMessage(t *testing.T) {
	q := newSendQueue(8, 1<<10)
	m, _ := buildData(4, 0, 1, "", make([]byte, 4<<10), 0)
	if !q.push(m) {
		t.Fatal("empty queue refused a large message")
	}
	m2, _ := buildData(4, 0, 2, "", make([]byte, 10), 0)
	if q.push(m2) {
		t.Fatal("queue over its bound accepted another message")
	}
	m2.free()
	for _, m := range q.takeAll(nil) {
		m.free()
	}
}
