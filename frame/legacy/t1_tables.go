package legacy

// Tables of the T1 form, from the Rust reference's src/codec/tables.rs as
// documented in wire reference §6.2. Values are []byte so the hot path can
// use them as output keys without conversions.

var t1KeyPairs = [...][2]string{
	{"content", "c"},
	{"model", "M"},
	{"temperature", "T"},
	{"max_tokens", "x"},
	{"stream", "s"},
	{"stop", "S"},
	{"top_p", "p"},
	{"frequency_penalty", "f"},
	{"presence_penalty", "P"},
	{"function_call", "fc"},
	{"arguments", "a"},
	{"tool_calls", "tc"},
	{"tool_choice", "tx"},
	{"response_format", "rf"},
	{"logit_bias", "lb"},
	{"logprobs", "lp"},
	{"top_logprobs", "tlp"},
	{"choices", "C"},
	{"finish_reason", "fr"},
	{"prompt_tokens", "pt"},
	{"completion_tokens", "ct"},
	{"total_tokens", "tt"},
	{"delta", "D"},
	{"system_fingerprint", "sf"},
	{"error", "E"},
}

// Role values are mapped only under the key "role" (or "r"); "user" is kept.
var t1RolePairs = [...][2]string{
	{"system", "S"},
	{"assistant", "A"},
	{"function", "F"},
	{"tool", "T"},
}

// Model values are mapped only under the key "model" (or "M"), exact match.
var t1ModelPairs = [...][2]string{
	{"gpt-4o", "g4o"},
	{"gpt-4o-mini", "g4om"},
	{"gpt-4-turbo", "g4t"},
	{"gpt-4", "g4"},
	{"gpt-3.5-turbo", "g35t"},
	{"llama-3.1-405b", "l31405"},
	{"llama-3.1-70b", "l3170"},
	{"llama-3.1-8b", "l318"},
	{"llama-3.3-70b", "l3370"},
	{"mistral-large-latest", "mll"},
	{"mistral-small-latest", "msl"},
	{"mixtral-8x7b", "mx87"},
	{"mixtral-8x22b", "mx822"},
	{"deepseek-v3", "dv3"},
	{"deepseek-r1", "dr1"},
	{"deepseek-coder", "dc"},
	{"qwen-2.5-72b", "q2572"},
	{"qwen-2.5-32b", "q2532"},
	{"qwen-2.5-coder-32b", "qc32"},
}

var (
	t1KeyAbbrev, t1KeyExpand     = pairMaps(t1KeyPairs[:])
	t1RoleAbbrev, t1RoleExpand   = pairMaps(t1RolePairs[:])
	t1ModelAbbrev, t1ModelExpand = pairMaps(t1ModelPairs[:])
)

func pairMaps(pairs [][2]string) (fwd, rev map[string][]byte) {
	fwd = make(map[string][]byte, len(pairs))
	rev = make(map[string][]byte, len(pairs))
	for _, p := range pairs {
		fwd[p[0]] = []byte(p[1])
		rev[p[1]] = []byte(p[0])
	}
	return fwd, rev
}

// t1Defaults are inserted by the decoder into request-like objects that lack
// them, in serde's spelling (1.0 is an f64, 1 and 0 are integers).
var t1Defaults = [...]struct{ key, value []byte }{
	{[]byte("temperature"), []byte("1.0")},
	{[]byte("top_p"), []byte("1.0")},
	{[]byte("n"), []byte("1")},
	{[]byte("stream"), []byte("false")},
	{[]byte("frequency_penalty"), []byte("0")},
	{[]byte("presence_penalty"), []byte("0")},
}

// t1Patterns is the optional pattern table, applied in this order as plain
// string replacement on the serialized JSON. The code of entry i is byte i+1.
var t1Patterns = [...]string{
	`{"role":"user","content":"`,
	`{"role":"assistant","content":"`,
	`{"role":"system","content":"`,
	`{"role":"tool","content":"`,
	`{"index":0,"delta":{`,
	`{"index":0,"message":{`,
	`"finish_reason":"stop"`,
	`"finish_reason":"length"`,
	`"finish_reason":"tool_calls"`,
	`{"type":"function","function":{`,
	`"choices":[{`,
	`{"messages":[`,
	`],"model":"`,
}
