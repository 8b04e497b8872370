package integration

import (
	"context"
	"html"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/buildinfo"
)

// chromium is Debian's chromium, which .ci/run installs. In CI (env CI
// set) its absence fails the test; elsewhere the test is skipped, saying
// how to get it.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; .ci/run installs it with apt-get install chromium")
		}
		t.Skip("chromium is not installed (apt-get install -y chromium); CI runs this test")
	}
	return path
}

var (
	headOrTag = regexp.MustCompile(`(?s)<head>.*?</head>|<[^>]*>`)
	spaces    = regexp.MustCompile(`\s+`)
)

// browserText loads url in headless chromium and returns the text a person
// reads on the page once it has loaded (its DOM, tags removed).
func browserText(t *testing.T, url string) (dom, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", url, err, stderr.String())
	}
	dom = string(out)
	text = html.UnescapeString(headOrTag.ReplaceAllString(dom, " "))
	return dom, strings.TrimSpace(spaces.ReplaceAllString(text, " "))
}

// The status page, as a browser shows it, names the build, the agents and
// their models, the providers of each model with their outstanding
// requests, and live rates; a model name that is markup is shown as text,
// not obeyed.
func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel()
	chromium(t) // before anything starts
	d := startDaemon(t, nil)
	const markup = `<b id="injected">bold</b>`
	held, release := make(chan struct{}, 1), make(chan struct{})
	dialClient(t, d.url("ws"), client.Options{AgentID: "status-prov", Models: []string{"m-status", markup},
		Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			if strings.Contains(string(req.Body), `"content":"hold"`) {
				held <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			_ = w.Respond([]byte(`{"id":"r","object":"chat.completion","choices":[]}`))
		})})
	req := dialClient(t, d.url("quic"), client.Options{AgentID: "status-req", TLSConfig: d.clientTLS(t)})
	done := make(chan error, 1)
	go func() {
		_, err := req.Do(context.Background(), chat("m-status", "hold", false))
		done <- err
	}()
	<-held
	defer func() {
		close(release)
		if err := <-done; err != nil {
			t.Errorf("held request: %v", err)
		}
	}()

	page := "http://" + d.AdminAddr().String() + "/"
	// A first load starts the rates; the browser's, a second later, shows
	// them.
	resp, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("GET / Content-Type %q", ct)
	}
	time.Sleep(time.Second)
	for range 3 {
		if _, err := req.Do(context.Background(), chat(markup, "hello", false)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)

	dom, text := browserText(t, page)
	bi := buildinfo.Get()
	for _, want := range []string{
		"version " + bi.Version + ", commit " + bi.Commit + ", " + bi.GoVersion,
		"Sessions: 2 (1 over quic, 1 over ws). Requests outstanding at providers: 1.",
		"m-status status-prov (this node, 1 outstanding)",
		markup + " status-prov (this node, 1 outstanding)",
		"status-prov ws m-status, " + markup + " 1 0",
		"status-req quic 0 1",
		"frames in / s",
		"requests ended / s",
		"Not clustered.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not read %q; it reads:\n%s", want, text)
		}
	}
	for _, idle := range []string{"requests ended / s 0.00", "frames in / s 0.00"} {
		if strings.Contains(text, idle) {
			t.Errorf("the page reads %q after 3 requests", idle)
		}
	}
	if strings.Contains(dom, `<b id="injected">`) {
		t.Error("a model name became markup on the page")
	}
	if !strings.Contains(dom, `http-equiv="refresh"`) {
		t.Error("the page does not refresh itself")
	}
}
