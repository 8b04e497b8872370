#!/usr/bin/env bash
# Measures the OpenAI edge as deployed, each part in a process of its own on
# this machine: a mock OpenAI server that nginx answers from memory, nginx as a
# reverse proxy in front of it (the baseline any gateway is held to), Go's own
# reverse proxy (bench/edge/goproxy: the floor of any Go gateway), and m2md
# two ways: the mesh, m2md serve's endpoint -> daemon -> m2md upstream -> the
# mock, and the gateway in one process, m2md serve --upstream-base-url, also
# with GOMAXPROCS=1 (the Go runtime on one CPU: what it saves in latency at
# low rates and costs in throughput).
#
#   bench/edge/run.sh [path/to/m2md] [seconds per run]
#
# Needs nginx and wrk (Debian: apt-get install nginx-light wrk). Everything
# listens on 127.0.0.1 (ports 8000-8004, 8080-8082, 4433, 9000, 9090-9096)
# and is stopped on exit. The request is testdata/corpus/req-chat-1k-01.json
# (1,215 bytes), the answer resp-chat-01.json (907 bytes); the streamed answer
# is stream-chunk-01..10.json as SSE events and [DONE]. docs/benchmarks.md,
# "The OpenAI edges", has the figures this printed and how to read them.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
m2md=${1:-}
secs=${2:-10}
if [[ -z $m2md ]]; then
	m2md=$(mktemp -d)/m2md
	(cd "$repo" && go build -o "$m2md" ./cmd/m2md)
fi
m2md=$(realpath "$m2md")
goproxy=$(mktemp -d)/goproxy
(cd "$repo" && go build -o "$goproxy" ./bench/edge/goproxy)
for tool in nginx wrk; do
	command -v $tool >/dev/null || { echo "$0: needs $tool (Debian: apt-get install nginx-light wrk)" >&2; exit 2; }
done

dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[[ -f $dir/nginx.pid ]] && kill "$(cat "$dir/nginx.pid")" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$dir" "$(dirname "$goproxy")"
}
trap cleanup EXIT

corpus=$repo/testdata/corpus
# nginx's quoted strings take \ as an escape: double it so the JSON's own
# escapes reach the client as written.
esc() { sed 's/\\/\\\\/g' "$1"; }
answer=$(esc "$corpus/resp-chat-01.json")
stream=""
for i in 01 02 03 04 05 06 07 08 09 10; do
	stream+="data: $(esc "$corpus/stream-chunk-$i.json")\\n\\n"
done
stream+="data: [DONE]\\n\\n"
cat >"$dir/nginx.conf" <<EOF
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/nginx.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_buffer_size 64k;
  upstream mock { server 127.0.0.1:9000; keepalive 128; }
  server {
    listen 127.0.0.1:9000;
    location = /v1/chat/completions { default_type application/json; return 200 '$answer'; }
    location = /stream/v1/chat/completions { default_type text/event-stream; return 200 '$stream'; }
  }
  server {
    listen 127.0.0.1:8081;
    location / { proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
EOF
nginx -c "$dir/nginx.conf" -p "$dir"

# The mesh, zero configuration but for the upstreams' base URLs: one
# upstream for the plain answer (model chat-1k), one for the stream
# (model stream-10). HOME keeps the development certificate out of the user's.
export HOME=$dir
"$m2md" serve --log-level warn --admin-addr 127.0.0.1:9090 >"$dir/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:9090/healthz && break; sleep 0.1; done
"$m2md" upstream --log-level warn --admin-addr 127.0.0.1:9091 --base-url http://127.0.0.1:9000/v1 --models chat-1k >"$dir/up1.log" 2>&1 &
pids+=($!)
"$m2md" upstream --log-level warn --admin-addr 127.0.0.1:9092 --base-url http://127.0.0.1:9000/stream/v1 --models stream-10 >"$dir/up2.log" 2>&1 &
pids+=($!)
for model in chat-1k stream-10; do
	for _ in $(seq 100); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" http://127.0.0.1:8000/v1/chat/completions || true)
		[[ $code == 200 ]] && break
		sleep 0.1
	done
	[[ $code == 200 ]] || { echo "$0: the mesh does not answer model $model (HTTP $code)" >&2; cat "$dir"/*.log >&2; exit 1; }
done

# The gateway in one process, twice (one upstream base URL each): its own
# endpoint, no mesh listener; and the same two on one CPU (GOMAXPROCS=1).
gateway() { # port admin-port base-url-path model [GOMAXPROCS]
	env ${5:+GOMAXPROCS=$5} "$m2md" serve --log-level warn --quic-addr - --ws-addr - --openai-addr 127.0.0.1:$1 --admin-addr 127.0.0.1:$2 \
		--upstream-base-url http://127.0.0.1:9000$3 --upstream-models $4 >"$dir/gateway-$1.log" 2>&1 &
	pids+=($!)
}
gateway 8001 9093 /v1 chat-1k
gateway 8002 9094 /stream/v1 stream-10
gateway 8003 9095 /v1 chat-1k 1
gateway 8004 9096 /stream/v1 stream-10 1
"$goproxy" 127.0.0.1:8082 http://127.0.0.1:9000 >"$dir/goproxy.log" 2>&1 &
pids+=($!)
for u in 8001 8002 8003 8004 8082; do
	for _ in $(seq 100); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -d '{"model":"chat-1k","messages":[{"role":"user","content":"hi"}]}' http://127.0.0.1:$u/v1/chat/completions || true)
		[[ $code == 200 || $code == 404 ]] && break
		sleep 0.1
	done
	[[ $code == 200 || $code == 404 ]] || { echo "$0: 127.0.0.1:$u does not answer (HTTP $code)" >&2; cat "$dir"/*.log >&2; exit 1; }
done

sed '0,/"model": *"[^"]*"/s//"model":"chat-1k"/' "$corpus/req-chat-1k-01.json" >"$dir/req.json"
cat >"$dir/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$dir/req.json", "rb"); wrk.body = f:read("*a"); f:close()
EOF

direct=http://127.0.0.1:9000/v1
proxy=http://127.0.0.1:8081/v1
goproxy=http://127.0.0.1:8082/v1
mesh=http://127.0.0.1:8000/v1
gateway=http://127.0.0.1:8001/v1
gateway1=http://127.0.0.1:8003/v1
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $("$m2md" version 2>/dev/null | head -1)"

# A virtual machine's CPUs can be taken by its host: each measurement says
# which share of the CPU time was stolen while it ran (/proc/stat), since a
# run with much stolen time measures the host, not the paths. m2md bench
# says it on its "machine:" line; wrk's rows get it here.
cpu() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; }
stolen() { # the snapshot cpu gave at the start
	local t0 s0 t1 s1
	read -r t0 s0 <<<"$1"
	read -r t1 s1 < <(cpu)
	awk -v t=$((t1 - t0)) -v s=$((s1 - s0)) 'BEGIN{printf "%.0f%% of CPU time stolen by the host\n", t ? 100 * s / t : 0}'
}

echo "## maximum rate, wrk -t2 -c32 -d${secs}s (closed loop)"
for u in $direct $proxy $goproxy $mesh $gateway $gateway1; do
	wrk -t2 -c32 -d1s -s "$dir/post.lua" "$u/chat/completions" >/dev/null
	printf '%-28s ' "$u"
	c=$(cpu)
	wrk -t2 -c32 -d"${secs}s" -s "$dir/post.lua" "$u/chat/completions" | awk '/Requests\/sec/{r=$2} /Non-2xx|Socket errors/{e=e" "$0} END{printf "%s", r " req/s" (e==""?"":" ERRORS:" e)}'
	echo ", $(stolen "$c")"
done

bench() { "$m2md" bench openai --file "$dir/req.json" --model "$@"; }
echo "## maximum rate, m2md bench openai --connections 32, each beside the direct call"
for u in $proxy $goproxy $mesh $gateway $gateway1; do
	echo "### $u"
	bench chat-1k --url "$u" --compare $direct --connections 32 --duration "${secs}s" --warmup 2s
done
for rate in 100 1000; do
	echo "## latency at $rate req/s (open loop), each beside the direct call"
	for u in $proxy $goproxy $mesh $gateway $gateway1; do
		echo "### $u"
		bench chat-1k --url "$u" --compare $direct --rate $rate --duration "${secs}s" --warmup 2s
	done
done
echo "## streamed, 10 chunks, time to the first chunk at 100 req/s, beside the direct call"
for u in http://127.0.0.1:8081/stream/v1 http://127.0.0.1:8082/stream/v1 $mesh http://127.0.0.1:8002/v1 http://127.0.0.1:8004/v1; do
	echo "### $u"
	bench stream-10 --url "$u" --compare http://127.0.0.1:9000/stream/v1 --rate 100 --stream --duration "${secs}s" --warmup 2s
done
echo "## the gateway on one CPU (GOMAXPROCS=1) beside the gateway on two, paired"
for rate in 100 1000; do
	echo "### $rate req/s"
	bench chat-1k --url $gateway1 --compare $gateway --rate $rate --duration "${secs}s" --warmup 2s
done
