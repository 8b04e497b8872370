package upstream

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readEvents(t testing.TB, in string, max int) ([]string, error) {
	e := newEventReader(strings.NewReader(in), max)
	defer e.release()
	var out []string
	for range 1000 {
		d, err := e.next()
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
	t.Fatal("more than 1000 events")
	return nil, nil
}

func TestEventReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"openai", "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, `{"b":2}`, "[DONE]"}},
		{"no space, CRLF", "data:{\"a\":1}\r\n\r\ndata:[DONE]\r\n\r\n", []string{`{"a":1}`, "[DONE]"}},
		{"comments and other fields", ": keep-alive\n\nevent: message\nid: 7\ndata: x\nretry: 10\n\n", []string{"x"}},
		{"multi-line data", "data: {\"a\":\ndata: 1}\n\n", []string{"{\"a\":\n1}"}},
		{"two spaces keep one", "data:  x\n\n", []string{" x"}},
		{"last event without blank line", "data: a\n\ndata: b", []string{"a", "b"}},
		{"blank lines alone", "\n\n\n", nil},
		{"empty data", "data:\n\n", []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readEvents(t, tc.in, 1<<20)
			if !errors.Is(err, io.EOF) {
				t.Fatalf("err %v", err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEventReaderBounded(t *testing.T) {
	for _, in := range []string{
		"data: " + strings.Repeat("x", 200) + "\n\n",
		strings.Repeat("data: xxxxxxxxxx\n", 30) + "\n",
		strings.Repeat("y", 200000),
	} {
		if _, err := readEvents(t, in, 100); !errors.Is(err, errEventTooLarge) {
			t.Errorf("%.20q…: %v, want errEventTooLarge", in, err)
		}
	}
}

// FuzzEventReader: any body yields events no larger than the bound and
// ends in io.EOF or errEventTooLarge, without panicking.
func FuzzEventReader(f *testing.F) {
	for _, s := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n", "data:x\r\n\r\n", ": c\n\ndata: a\ndata: b\n\n", "data", "\r\r\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 256
		// Events read one byte at a time and kept until the end (as a
		// batch keeps them until reuse) are those read whole and copied
		// at once.
		e := newEventReader(strings.NewReader(string(in)), max)
		defer e.release()
		slow := newEventReader(iotest.OneByteReader(strings.NewReader(string(in))), max)
		defer slow.release()
		var want []string
		var kept [][]byte
		for i := 0; ; i++ {
			if i > len(in)+1 {
				t.Fatal("more events than bytes")
			}
			d, err := e.next()
			d2, err2 := slow.next()
			if !errors.Is(err2, err) {
				t.Fatalf("event %d: error %v, one byte at a time %v", i, err, err2)
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, errEventTooLarge) {
					t.Fatalf("error %v", err)
				}
				break
			}
			if len(d) > max {
				t.Fatalf("event of %d bytes", len(d))
			}
			want, kept = append(want, string(d)), append(kept, d2)
			e.reuse()
		}
		for i := range want {
			if string(kept[i]) != want[i] {
				t.Fatalf("event %d kept as %q, read as %q", i, kept[i], want[i])
			}
		}
	})
}

// A line longer than the read buffer is gathered whole; events returned
// before reuse stay intact while later ones are read.
func TestEventReaderLongLines(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	in := "data: a\n\ndata: " + long + "\ndata: b\n\n: " + long + "\ndata: c\n\n"
	got, err := readEvents(t, in, 1<<20)
	if !errors.Is(err, io.EOF) || len(got) != 3 || got[0] != "a" || got[1] != long+"\nb" || got[2] != "c" {
		t.Fatalf("%d events, %v", len(got), err)
	}
	e := newEventReader(iotest.HalfReader(strings.NewReader(in)), 1<<20)
	defer e.release()
	var kept [][]byte
	for range 3 {
		d, err := e.next()
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, d)
	}
	if string(kept[0]) != "a" || string(kept[1]) != long+"\nb" || string(kept[2]) != "c" {
		t.Fatal("events changed while later ones were read")
	}
}

// ready says whether next would return an event without reading the body:
// the relay batches only what has arrived whole.
func TestEventReaderReady(t *testing.T) {
	for _, tc := range []struct {
		name, buffered string
		want           bool
	}{
		{"whole event", "data: {\"a\":1}\n\n", true},
		{"CRLF", "data: x\r\n\r\n", true},
		{"no blank line yet", "data: {\"a\":1}\n", false},
		{"half a line", "data: {\"a\"", false},
		{"comment block, then half an event", ": keep-alive\n\ndata: x\n", false},
		{"comment block, then an event", ": keep-alive\n\ndata: x\n\n", true},
		{"other fields only", "event: ping\nid: 3\n\n", false},
		{"data without colon", "data\n\n", true},
		{"field that starts like data", "database: x\n\n", false},
		{"nothing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One event first, so that the rest is what the reader has
			// buffered beyond it.
			pr, pw := io.Pipe()
			e := newEventReader(pr, 1<<20)
			go func() { pw.Write([]byte("data: first\n\n" + tc.buffered)) }()
			if d, err := e.next(); err != nil || string(d) != "first" {
				t.Fatalf("first event: %q %v", d, err)
			}
			if got := e.ready(); got != tc.want {
				t.Fatalf("ready() = %v with %q buffered", got, tc.buffered)
			}
			pw.Close()
			if tc.want {
				if _, err := e.next(); err != nil {
					t.Fatalf("next after ready: %v", err)
				}
			}
		})
	}
}
