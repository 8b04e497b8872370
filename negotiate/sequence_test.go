package negotiate

import (
	"errors"
	"sync"
	"testing"
)

func TestSequences(t *testing.T) {
	s := NewSequences(0)
	for want := uint64(1); want <= 3; want++ {
		got, err := s.NextSend(4)
		if err != nil || got != want {
			t.Fatalf("send %d, want %d (%v)", got, want, err)
		}
	}
	if got, _ := s.NextSend(8); got != 1 {
		t.Fatalf("channels share a counter: %d", got)
	}

	must(t, s.CheckReceive(4, 4, 1))
	for _, tc := range []struct {
		frameChannel uint32
		seq          uint64
	}{
		{4, 1}, // replay
		{4, 3}, // gap
		{4, 0},
		{8, 2}, // sent for another channel
	} {
		err := s.CheckReceive(4, tc.frameChannel, tc.seq)
		var se *SequenceError
		if !errors.Is(err, ErrReplay) || !errors.As(err, &se) || se.Want != 2 || se.Got != tc.seq {
			t.Fatalf("%+v: %v", tc, err)
		}
	}
	must(t, s.CheckReceive(4, 4, 2)) // refusals did not advance the counter

	s.Drop(4)
	if got, _ := s.NextSend(4); got != 1 {
		t.Fatalf("dropped channel restarts at %d", got)
	}
	must(t, s.CheckReceive(4, 4, 1))
}

func TestSequencesBounded(t *testing.T) {
	s := NewSequences(3)
	for ch := range uint32(3) {
		if _, err := s.Channel(ch * 4); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Channel(12); !errors.Is(err, ErrTooManyChannels) {
		t.Fatal(err)
	}
	if _, err := s.Channel(4); err != nil {
		t.Fatal("existing channel refused:", err)
	}
	s.Drop(0)
	if _, err := s.Channel(12); err != nil || s.Len() != 3 {
		t.Fatal(err, s.Len())
	}
}

func TestSequencesConcurrent(t *testing.T) {
	s := NewSequences(0)
	c, err := s.Channel(4)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 1000
	seen := make([]bool, workers*each+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				n := c.NextSend()
				mu.Lock()
				if seen[n] {
					t.Errorf("number %d handed out twice", n)
				}
				seen[n] = true
				mu.Unlock()
			}
			// Other channels come and go meanwhile.
			ch := uint32(100 + w)
			if _, err := s.NextSend(ch); err != nil {
				t.Error(err)
			}
			s.Drop(ch)
		})
	}
	wg.Wait()
	// Racing checks of the same number: exactly one wins.
	var wins sync.WaitGroup
	var ok int
	for range workers {
		wins.Go(func() {
			if c.CheckReceive(4, 1) == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wins.Wait()
	if ok != 1 {
		t.Fatalf("%d checks accepted sequence 1", ok)
	}
}

func BenchmarkSequenceCheck(b *testing.B) {
	c, _ := NewSequences(0).Channel(4)
	b.ReportAllocs()
	var n uint64
	for b.Loop() {
		n++
		if err := c.CheckReceive(4, n); err != nil {
			b.Fatal(err)
		}
	}
}
