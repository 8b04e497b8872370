package daemon

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Go's profiles are served on the admin endpoint only with Config.Pprof;
// the status page always is.
func TestAdminPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv := runServer(t, Config{QUICAddr: "-", WSAddr: "-", AdminAddr: "127.0.0.1:0", CertDir: t.TempDir(), Pprof: on})
		base := "http://" + srv.AdminAddr().String()
		get := func(path string) (int, string) {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
			if code, _ := get(path); code != want {
				t.Errorf("Pprof %v: GET %s: %d, want %d", on, path, code, want)
			}
		}
		if code, body := get("/"); code != http.StatusOK || !strings.Contains(body, "<h1>m2md") {
			t.Errorf("Pprof %v: GET /: %d", on, code)
		}
	}
}
