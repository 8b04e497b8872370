// Package bench measures m2md the way users do: the load generator behind
// `m2md bench load`, the OpenAI endpoint load behind `m2md bench openai`
// and the codec comparison behind `m2md bench codec`.
//
// # Load
//
// RunLoad sends request/response round trips through a daemon, a running
// one (LoadConfig.Target, quic://, ws://, wss://) or one it starts in this
// process. It brings both ends: echo providers, agents that serve the
// payloads' models and answer each request with its own frame after a
// configurable service time, and requester connections. Agents speak the
// protocol with its own building blocks (transport, negotiate, security,
// frame): handshake, DATA headers, per-channel sequence numbers and frame
// protection in the chosen security mode, exactly what the protocol asks of
// an agent, while frames are encoded once before the run and echoes are
// compared byte for byte rather than decoded, so that the generator costs as
// little as it can and every reply is still checked.
//
// Two load shapes: a closed loop (Concurrency requests in flight, each sent
// when the previous one of its worker ends) and an open loop (Rate requests
// per second on a fixed schedule). In the open loop latency runs from each
// request's intended send time, as in wrk2, so a target that falls behind
// cannot hide the wait by slowing the generator down (coordinated
// omission); the report says how late the generator itself sent
// (Result.SendLagP99US), and the pacer sleeps on the kernel's
// high-resolution timer where Go's would be a millisecond late
// (pace.go). Latencies go to HDR histograms (p50, p90, p99, p99.9, max at
// 0.1% precision) and to a per-interval timeline for charts.
//
// LoadConfig.Baseline runs the same load through a bare relay built on the
// same transport library with the same stream design (QUIC: a pooled
// stream per request in flight; WebSocket: one connection) but none of the
// M2M protocol: no negotiation, no DATA or frame headers, no security. It
// reads an 8-byte tag per message, the least a relay that multiplexes many
// requesters over few providers can read, and forwards the payload
// untouched. The ratio of the two runs is the protocol's cost.
// LoadConfig.Echo runs the generator against a target that echoes each
// message at once: the generator's own ceiling on this machine.
// LoadConfig.Compare "nats" runs the same load through an embedded
// nats-server (nats.go request/reply to queue-group responders, TLS when the
// transport is quic or wss): the system users would pick otherwise,
// measured in the same run on their own machine. With LoadConfig.NATSURL
// it goes to the user's own nats-server instead; beside a Target, both
// servers then run as deployed, each in a process of its own, and share
// nothing but the generator. In one process, a server shares the Go
// scheduler's Ps with the generator, which on a small machine can move the
// ratio by more than the two systems differ (docs/benchmarks.md).
//
// Agents batch as the daemon does: what they send in answer to messages
// already received, and senders that find another one sending, share one
// Cork of the connection (one write system call on WebSocket); nothing
// waits for more messages.
//
// With the daemon in this process, CPU time (getrusage) and allocations
// (runtime.MemStats) are the process's: daemon and generator together,
// which the baseline run measures the same way. For the daemon's own
// figures run it as a separate process (`m2md serve`) and give its
// Prometheus endpoint (LoadConfig.DaemonMetrics). Goroutines carry pprof
// labels role=daemon, role=relay or role=loadgen, so a CPU profile
// (LoadConfig.CPUProfile) splits by role with `go tool pprof -tags`.
//
// Everything runs on loopback unless a Target says otherwise, and every run
// ends: measurement and warm-up are bounded, requests time out, and a hard
// deadline covers set-up and tear-down.
//
// # OpenAI-compatible endpoints
//
// RunOpenAI loads an OpenAI-compatible chat completions endpoint over HTTP,
// wherever it runs (`m2md serve`'s, a model server's, another gateway's),
// with the same closed and open loops, pacing, intended-time latency and
// HDR histograms as the load benchmark; streamed answers are timed to the
// first chunk and to data: [DONE]. OpenAIConfig.Compare measures a second
// endpoint in the same run, the two taking turns in slices of time so that
// they see the same machine without loading it together. Every answer is
// read in full and checked (status, a chat completion's "choices", each
// stream event's JSON, the closing [DONE]); what fails counts as an error
// by kind, never as a fast answer.
//
// # Codec comparison
//
// RunCodec encodes every document of a corpus in every wire form (raw
// JSON, gzip+Base64, Brotli+Base64, zstd, M2M v1 text and binary,
// TokenNative text and binary for cl100k and o200k), checks that each
// decodes back byte for byte, and records the bytes, the cl100k tokens of
// the text forms and the encode and decode times; CodecReport sums them per
// size class and writes tables, CSV, JSON and a chart.
package bench
