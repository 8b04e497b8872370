package bufpool

import "testing"

func TestGetSizes(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 4097, 1 << 20, 1<<25 + 1} {
		b := Get(n)
		if len(*b) != n || cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		if n > 0 && n <= 1<<maxShift && cap(*b) >= 2*n && n > 512 {
			t.Fatalf("Get(%d): class too large: cap %d", n, cap(*b))
		}
		Put(b)
	}
}

func TestReuseAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	Put(Get(1000))
	allocs := testing.AllocsPerRun(100, func() {
		b := Get(1000)
		Put(b)
	})
	if allocs > 0 {
		t.Fatalf("steady-state Get/Put allocated %v times", allocs)
	}
}

func TestPutForeignBufferIgnored(t *testing.T) {
	b := make([]byte, 10, 1000) // not a power of two: not ours
	Put(&b)
	Put(nil)
}
