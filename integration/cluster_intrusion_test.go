package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/m2md/m2md/cluster"
)

// TestClusterRouteRefusesNonMembers: a process without the cluster's
// credentials that reaches a node's route port cannot inject frames or
// register agents. A NATS client (no credentials, or a wrong password) is
// refused at CONNECT; a raw route connection that sends CONNECT with a
// wrong password and then publishes a forged agent announcement and a
// forged request is answered "Authorization Violation" and closed, and no
// node learns the forged agent.
func TestClusterRouteRefusesNonMembers(t *testing.T) {
	auth := func(c *cluster.Config) { c.User, c.Password = "m2md", "correct horse battery staple" }
	nodes := startCluster(t, 2, auth, nil)
	route := nodes[0].Cluster().RouteAddr.String()

	for _, opt := range []nats.Option{func(*nats.Options) error { return nil }, nats.UserInfo("m2md", "wrong")} {
		nc, err := nats.Connect("nats://"+route, opt, nats.Timeout(2*time.Second), nats.NoReconnect())
		if err == nil {
			// Some refusals arrive after CONNECT: a publish must not get through.
			perr := nc.Publish("m2md.m2md.ctl", forgedUp())
			ferr := nc.FlushTimeout(2 * time.Second)
			nc.Close()
			if perr == nil && ferr == nil {
				t.Fatalf("a NATS client without the cluster password published on the route port")
			}
		}
	}

	conn, err := net.DialTimeout("tcp", route, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if info, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(info, "INFO ") {
		t.Fatalf("route port greeting %q, %v", info, err)
	}
	up := forgedUp()
	req := []byte("\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x04evil\x00\x01r\x07injectd#M2M")
	fmt.Fprintf(conn, "CONNECT {\"user\":\"m2md\",\"pass\":\"wrong\",\"name\":\"evil\",\"cluster\":\"m2md\"}\r\n")
	fmt.Fprintf(conn, "RMSG $G m2md.m2md.ctl %d\r\n%s\r\n", len(up), up)
	fmt.Fprintf(conn, "RMSG $G m2md.m2md.n.%s %d\r\n%s\r\n", nodes[0].Cluster().Node, len(req), req)
	fmt.Fprintf(conn, "PUB m2md.m2md.ctl %d\r\n%s\r\n", len(up), up)
	rest, err := io.ReadAll(r)
	if !strings.Contains(string(rest), "Authorization Violation") {
		t.Fatalf("route port answered %q (%v), want an authorization violation", rest, err)
	}
	time.Sleep(300 * time.Millisecond) // more than a heartbeat: an accepted event would have arrived
	for _, d := range nodes {
		if _, ok := d.AgentNode("", "injected"); ok {
			t.Fatalf("node %s learned an agent a non-member announced", d.Cluster().Node)
		}
		if n := d.Cluster().Nodes; n != 1 {
			t.Fatalf("node %s hears %d nodes, want 1", d.Cluster().Node, n)
		}
	}
}

// forgedUp is an agent announcement as a node would publish it.
func forgedUp() []byte {
	return []byte(`` + "\x03" + `{"t":"up","node":"evil","seq":1,"agent":{"id":"injected","session":"s1","node":"evil","models":["gpt-4o"],"stamp":1}}`)
}
