package openai

// How the OpenAI edges, the endpoint of m2md serve (its requests) and m2md
// upstream (its answers), compress the documents they send
// (client.Options.CompressionQuality and CompressFrom, frame.Limits):
// documents under CompressFrom bytes go stored, longer ones Brotli at
// CompressionQuality. An edge's CPU bounds its throughput and its own work
// is most of the latency it adds; Brotli was the largest part of both.
// Timed inside both processes at 100 req/s, compressing and decompressing
// a 1 KB chat request and its answer at quality 1 took 150 µs of the 1.1 ms
// they spent in the mesh, to save some 800 bytes that the HTTP legs carry
// as plain JSON anyway (docs/benchmarks.md, "The OpenAI edges"). From 4 KiB
// the bytes saved outweigh the CPU on any but a fast local link, and long
// contexts shrink 3–6x, so those are still compressed, at quality 1: a
// third of the reference's quality 5's CPU for about 12 % more bytes.
// Receivers accept stored payloads of any length and any quality.
const (
	CompressFrom       = 4 << 10
	CompressionQuality = 1
)
