// Command goproxy is the floor of bench/edge/run.sh: the Go standard
// library's reverse proxy (net/http/httputil.ReverseProxy) and nothing
// else, in front of the mock OpenAI server. Any Go gateway makes the two
// HTTP exchanges it makes, so what m2md adds beyond it is m2md's own
// work; what it adds beyond nginx is also Go's net/http.
//
//	goproxy LISTEN_ADDR TARGET_URL
package main

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: goproxy LISTEN_ADDR TARGET_URL")
		os.Exit(2)
	}
	target, err := url.Parse(os.Args[2])
	if err != nil {
		log.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(target)
	// As m2md upstream's: connections kept alive and pooled, enough idle
	// ones for every connection of the load.
	p.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	p.FlushInterval = -1 // stream events as they come, as the mesh does
	log.Fatal(http.ListenAndServe(os.Args[1], p))
}
