package ingress

import (
	"fmt"
	"strings"
	"testing"

	"github.com/m2md/m2md/negotiate"
)

func TestParseKeys(t *testing.T) {
	k, err := ParseKeys(strings.NewReader("# keys\n\nsk-alice-0001 alice\n  sk-bob-00002   bob   acme  \nsk-carol-003 alice\n"), "f")
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 3 || len(k.Identities()) != 2 {
		t.Fatalf("%d keys, %d identities", k.Len(), len(k.Identities()))
	}
	for key, want := range map[string]Identity{
		"sk-alice-0001": {AgentID: "alice"}, "sk-bob-00002": {AgentID: "bob", Org: "acme"}, "sk-carol-003": {AgentID: "alice"},
	} {
		if got, ok := k.lookup(key); !ok || got != want {
			t.Errorf("%s: %+v %v", key, got, ok)
		}
	}
	for _, bad := range []string{"sk-alice-0002", "", "sk-alice-000"} {
		if _, ok := k.lookup(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, in := range []string{
		"", "# only comments\n", "short alice\n", "sk-12345678\n", "sk-12345678 a b c\n",
		"sk-12345678 bad/agent\n", "sk-12345678 a bad.org\n", "sk-12345678 a\nsk-12345678 b\n",
	} {
		if _, err := ParseKeys(strings.NewReader(in), "f"); err == nil {
			t.Errorf("%q accepted", in)
		} else if strings.Contains(err.Error(), "sk-12345678") {
			t.Errorf("error quotes the key: %v", err)
		}
	}
	// The error names the file and line, comments and blank lines counted.
	if _, err := ParseKeys(strings.NewReader("# keys\n\nsk-alice-0001 alice\nshort bob\n"), "keys.txt"); err == nil || !strings.HasPrefix(err.Error(), "keys.txt:4:") {
		t.Errorf("error %v does not name keys.txt:4", err)
	}
}

// The default key name holds the org: one agent id in two orgs is two
// names, with limits of their own.
func TestKeyNameOfOrg(t *testing.T) {
	k, err := ParseKeys(strings.NewReader("sk-alice-0001 alice acme rpm=1\nsk-alice-0002 alice other rpm=5\nsk-alice-0003 alice\n"), "f")
	if err != nil {
		t.Fatal(err)
	}
	names := k.names()
	for name, rpm := range map[string]int{"alice@acme": 1, "alice@other": 5, "alice": 0} {
		if l, ok := names[name]; !ok || l.RequestsPerMinute != rpm {
			t.Errorf("name %s: %+v %v, want rpm %d; names %v", name, l, ok, rpm, names)
		}
	}
}

// FuzzParseKeys: any file parses or fails with an error that never quotes
// a key, and every key found maps to a valid identity.
func FuzzParseKeys(f *testing.F) {
	f.Add("sk-alice-0001 alice\n# c\nsk-bob-00002 bob acme\n")
	f.Add("sk-x\tagent\r\n")
	f.Add("\x00\xff 12345678 a")
	f.Fuzz(func(t *testing.T, in string) {
		k, err := ParseKeys(strings.NewReader(in), "f")
		if err != nil {
			return
		}
		for _, id := range k.Identities() {
			if id.AgentID == "" {
				t.Fatalf("empty identity from %q", in)
			}
		}
	})
}

func TestParseKeySettings(t *testing.T) {
	k, err := ParseKeys(strings.NewReader(
		"sk-alice-0001 alice rpm=60 tpm=1000 concurrent=2 models=gpt-4o,gpt-4o-mini\n"+
			"sk-alice-0002 alice acme name=laptop\n"+
			"sk-bob-000001 bob name=shared rpm=5\nsk-bob-000002 carol name=shared rpm=5\n"), "f")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]KeyLimits{
		"alice":  {RequestsPerMinute: 60, TokensPerMinute: 1000, Concurrent: 2, Models: []string{"gpt-4o", "gpt-4o-mini"}},
		"laptop": {},
		"shared": {RequestsPerMinute: 5},
	}
	got := k.names()
	if len(got) != len(want) {
		t.Fatalf("names %v", got)
	}
	for name, l := range want {
		if !sameLimits(got[name], l) {
			t.Errorf("%s: %+v, want %+v", name, got[name], l)
		}
	}
	if e, _ := k.entry("sk-alice-0002"); e.id != (Identity{AgentID: "alice", Org: "acme"}) || e.name != "laptop" {
		t.Errorf("sk-alice-0002: %+v", e)
	}
	for _, in := range []string{
		"sk-12345678 a rpm=x\n", "sk-12345678 a rpm=-1\n", "sk-12345678 a rpm=1 rpm=2\n", "sk-12345678 a color=red\n",
		"sk-12345678 a models=\n", "sk-12345678 a models=a,,b\n", "sk-12345678 a name=bad/name\n",
		"sk-12345678 a rpm=1 acme\n", "sk-12345678 a rpm=1\nsk-87654321 a rpm=2\n", "sk-12345678 a tpm=99999999999999999\n",
	} {
		if _, err := ParseKeys(strings.NewReader(in), "f"); err == nil {
			t.Errorf("%q accepted", in)
		} else if strings.Contains(err.Error(), "sk-12345678") {
			t.Errorf("error quotes the key: %v", err)
		}
	}
	// Each bound is inclusive: a key of 8 characters, a limit of 0 (none)
	// or maxLimit, a model of MaxModelLen bytes.
	edge := fmt.Sprintf("sk-12345 a rpm=0 tpm=%d models=%s\n", maxLimit, strings.Repeat("m", negotiate.MaxModelLen))
	if k, err := ParseKeys(strings.NewReader(edge), "f"); err != nil || k.names()["a"].TokensPerMinute != maxLimit {
		t.Errorf("limits at their bounds: %v", err)
	}
}
