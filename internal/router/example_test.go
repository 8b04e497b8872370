package router_test

import (
	"errors"
	"fmt"

	"github.com/m2md/m2md/internal/router"
)

// conn stands for the daemon's session; the router hands it back.
type conn struct{ name string }

// The daemon's side of one request: route it, deliver it, route the
// provider's replies back, and tell requesters when a provider leaves.
func Example() {
	r := router.New[*conn](router.Config{})
	alice, _, _ := r.Register("", "alice", nil, &conn{"alice's connection"})
	bob, _, _ := r.Register("", "bob", []string{"gpt-4o"}, &conn{"bob's connection"})

	// alice: DATA request id 1 on channel 4, peer "", M2M frame for gpt-4o.
	d, err := r.RouteRequest(alice, router.Request{ID: 1, Channel: 4, Model: []byte("gpt-4o"), HasRoutingHeader: true})
	if err != nil {
		fmt.Println("error reply to alice:", err.(router.Reason).Code())
		return
	}
	fmt.Printf("to %s: request_id %d, peer %q\n", d.Provider.Value().name, d.ID, alice.AgentID())

	// bob streams a chunk, then the final reply.
	for _, end := range []bool{false, true} {
		rep, err := r.RouteReply(bob, d.ID, end)
		if err != nil {
			fmt.Println("dropped:", err)
			continue
		}
		fmt.Printf("to %s on channel %d: request_id %d, peer %q, END %v\n",
			rep.Requester.Value().name, rep.Channel, rep.RequestID, bob.AgentID(), rep.End)
	}

	// A second request, then bob's connection ends: his reader goroutine
	// removes him and alice is told.
	d, _ = r.RouteRequest(alice, router.Request{ID: 2, Channel: 4, Model: []byte("gpt-4o"), HasRoutingHeader: true})
	for _, o := range r.Remove(bob) {
		fmt.Printf("to %s on channel %d: request_id %d, error %s\n",
			o.Requester.Value().name, o.Channel, o.RequestID, router.ErrAgentGone.Code())
	}
	_, err = r.RouteRequest(alice, router.Request{ID: 3, Channel: 4, Model: []byte("gpt-4o"), HasRoutingHeader: true})
	fmt.Println(errors.Is(err, router.ErrNoRoute), err.(router.Reason).Code())
	// Output:
	// to bob's connection: request_id 1, peer "alice"
	// to alice's connection on channel 4: request_id 1, peer "bob", END false
	// to alice's connection on channel 4: request_id 1, peer "bob", END true
	// to alice's connection on channel 4: request_id 2, error agent_gone
	// true no_route
}
