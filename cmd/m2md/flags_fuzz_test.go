package main

import "testing"

// FuzzByteSize: any text gives a size within the flag's range or an error,
// never a panic, and the value is unchanged on error.
func FuzzByteSize(f *testing.F) {
	for _, s := range []string{"65536", "64KiB", "16MiB", "1MB", "1 MiB", "-1", "", "1e3", "18446744073709551616", "0x10", "lots"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, b := range []*byteSize{{max: 16 << 20}, {unlimited: true}} {
			n := 7
			b.p = &n
			if err := b.Set(s); err != nil {
				if n != 7 {
					t.Fatalf("%q: value changed to %d on error %v", s, n, err)
				}
				continue
			}
			if n < -1 || (n == -1 && !b.unlimited) || (b.max > 0 && n > b.max) {
				t.Fatalf("%q: %d out of range (%+v)", s, n, b)
			}
		}
	})
}
