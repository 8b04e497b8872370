package openai

import "github.com/m2md/m2md/frame"

// CompressionQuality is how the OpenAI edges compress payloads, the
// endpoint of m2md serve its requests and m2md upstream its answers
// (client.Options.CompressionQuality, frame.Limits.Quality): not at all.
// An edge's CPU bounds its throughput and its own work is most of the
// latency it adds, and Brotli, even at quality 1, was the largest part of
// both: about a third of each edge's CPU, and 150 µs of the time a 1 KB
// chat request spends in the mesh at 100 req/s (docs/benchmarks.md, "The
// OpenAI edges"). The bytes saved are those the HTTP legs carry as plain
// JSON anyway; a conversation's later turns still travel as deltas.
// Receivers accept uncompressed payloads of any length.
const CompressionQuality = frame.NoCompression
