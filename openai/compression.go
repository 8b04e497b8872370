package openai

// CompressionQuality is the Brotli quality the OpenAI edges compress
// payloads with: the endpoint of m2md serve its requests, m2md upstream its
// answers (client.Options.CompressionQuality, frame.Limits.Quality). An
// edge's CPU bounds its throughput, and on 1 KB chat documents quality 1
// costs about a third of the CPU of the wire reference's quality 5 for about
// 12 % more bytes (docs/benchmarks.md, "The OpenAI edges"). Receivers accept
// any quality.
const CompressionQuality = 1
