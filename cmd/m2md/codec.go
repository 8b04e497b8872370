package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/m2md/m2md/codec"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
	"github.com/m2md/m2md/internal/llama3vocab"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/tokennative"
)

// readInput reads stdin up to the 16 MiB message limit; more is bad input,
// found before it is all buffered. Empty stdin is bad input for every
// command: it is almost always a mistake in a pipe, and no wire form is empty.
func readInput(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, frame.DefaultMaxMessage+1))
	if err != nil {
		return nil, fmt.Errorf("reading stdin: %w", err)
	}
	if len(b) > frame.DefaultMaxMessage {
		return nil, fmt.Errorf("input exceeds the %d-byte message limit", frame.DefaultMaxMessage)
	}
	if len(b) == 0 {
		return nil, errors.New("stdin is empty")
	}
	return b, nil
}

func parseEncoding(s string) (tokennative.Encoding, error) {
	switch strings.ToLower(s) {
	case "cl100k", "cl100k_base", "c":
		return tokennative.Cl100k, nil
	case "o200k", "o200k_base", "o":
		return tokennative.O200k, nil
	case "llama", "llama3", "l":
		return tokennative.Llama3, nil
	}
	return 0, usagef("--encoding must be cl100k, o200k or llama, not %q", s)
}

func parseSecurity(flagName, s string) (frame.Security, error) {
	m, err := negotiate.ParseSecurityMode(s)
	if err != nil {
		return 0, usagef("--%s must be none, hmac or aead, not %q", flagName, s)
	}
	return m, nil
}

// parseKey reads --key; mode, when known, sets the length it must have.
// keyEnvVar holds a frame key in hex for compress and decompress when
// neither --key-file nor --key is given.
const keyEnvVar = "M2MD_KEY"

// readKey returns the frame key from --key-file, else $M2MD_KEY (when
// useEnv), else --key. No source: nil.
func readKey(hexFlag, file string, useEnv bool, mode frame.Security) (security.Secret, error) {
	var text, from string
	switch {
	case hexFlag != "" && file != "":
		return nil, usagef("give --key-file or --key, not both")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("--key-file: %v", err)
		}
		text, from = strings.TrimSpace(string(b)), "--key-file"
		clear(b)
	case hexFlag != "":
		text, from = hexFlag, "--key"
	case useEnv && os.Getenv(keyEnvVar) != "":
		text, from = os.Getenv(keyEnvVar), keyEnvVar
	default:
		return nil, nil
	}
	k, err := hex.DecodeString(text)
	if err != nil {
		return nil, usagef("%s must be hex (two digits per byte): %v", from, err)
	}
	switch {
	case mode == frame.SecurityHMAC && len(k) < security.MinHMACKeyLen:
		return nil, usagef("%s for hmac must be at least %d bytes (%d hex digits), not %d", from, security.MinHMACKeyLen, 2*security.MinHMACKeyLen, len(k))
	case mode == frame.SecurityAEAD && len(k) < security.AEADKeyLen:
		return nil, usagef("%s for aead must be at least %d bytes (%d hex digits), not %d", from, security.AEADKeyLen, 2*security.AEADKeyLen, len(k))
	}
	return security.Secret(k), nil
}

// keyFlagGiven names the key flag the user gave, for messages about it.
func keyFlagGiven(hexFlag, file string) string {
	if file != "" {
		return "--key-file"
	}
	return "--key"
}

// warnKeyFlag tells a user of --key, once the command is about to run, that
// the key is seen by anyone who can list processes or read the history.
func warnKeyFlag(hexFlag string, stderr io.Writer) {
	if hexFlag != "" {
		fmt.Fprintf(stderr, "warning: --key shows the key to anyone who can list processes or read your shell history; use --key-file or $%s\n", keyEnvVar)
	}
}

// llamaVocabSource says where a Llama 3 vocabulary comes from: m2md does
// not ship one.
const llamaVocabSource = "get one with 'go mod download -json " + llama3vocab.Module + "' (outside a Go module; DIR is its Dir/" + llama3vocab.ModuleDir + "), or use Meta's original/tokenizer.model of a Llama 3 model (README, \"The CLI\")"

// llamaPath is where the Llama 3 vocabulary comes from: the flag, else the
// environment variable M2MD_LLAMA3_VOCAB.
func llamaPath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(llama3vocab.EnvVar)
}

// inputError rewrites a codec error about the user's input in the user's
// terms: what is wrong with stdin, or which flag or variable to set.
func inputError(err error) error {
	var se *jsonscan.Error
	switch {
	case errors.As(err, &se) && errors.Is(err, jsonscan.ErrSyntax):
		return fmt.Errorf("stdin is not valid JSON: %s at byte %d", se.Reason, se.Offset)
	case errors.As(err, &se):
		return fmt.Errorf("stdin is beyond a JSON limit of the wire forms: %s at byte %d", se.Reason, se.Offset)
	case errors.Is(err, tokennative.ErrUnavailable):
		return fmt.Errorf("--encoding llama needs the Llama 3 vocabulary: pass --llama3-vocab DIR or set %s=DIR; %s", llama3vocab.EnvVar, llamaVocabSource)
	case errors.Is(err, codec.ErrKeyRequired):
		return fmt.Errorf("the frame is protected (hmac or aead): pass its key with --key-file FILE or $%s", keyEnvVar)
	}
	return err
}

func runCompress(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("compress", `compress [flags] < in.json > out

Reads JSON (or any text) on stdin and writes its wire form on stdout, without
a trailing newline. Every form but t1 decompresses to the input byte for byte;
t1 (legacy) may rename keys, drop nulls and round numbers, and is refused for
a document it would change unless --lossy is given.`, stderr)
	algo := fs.String("algo", "auto", "wire `form`: auto, m2m, tokennative, brotli, t1, zlib, dictionary or none;\nauto picks an M2M v1 frame for --security and --binary (--binary then needs JSON)")
	encoding := fs.String("encoding", "cl100k", "TokenNative `tokenizer`: cl100k, o200k or llama")
	binary := fs.Bool("binary", false, "write the raw binary shape (m2m and tokennative) instead of Base64 text;\nbinary tokennative has no prefix: decompress it with --algo tokennative")
	securityMode := fs.String("security", "none", "protect an M2M v1 frame with this security `mode`: none, hmac or aead (needs a key: --key-file or $"+keyEnvVar+")")
	keyHex := fs.String("key", "", "`hex` key for --security (hmac: 16 bytes or more, aead: 32); visible in ps: prefer --key-file or $"+keyEnvVar)
	keyFile := fs.String("key-file", "", "`file` holding the hex key for --security; default $"+keyEnvVar)
	llama := fs.String("llama3-vocab", "", "Llama 3 vocabulary `path` for --encoding llama: a folder with encoder.json, or Meta's tokenizer.model;\ndefault $M2MD_LLAMA3_VOCAB. m2md does not ship it: "+llamaVocabSource)
	lossy := fs.Bool("lossy", false, "accept a t1 encoding that does not decompress to the input byte for byte")
	verbose := fs.Bool("v", false, "print the algorithm, the reason for it and the sizes on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var opt codec.EncodeOptions
	if *algo == "auto" {
		opt.Auto = true
	} else {
		a, err := codec.ParseAlgorithm(*algo)
		if err != nil {
			return usagef("--algo must be auto, m2m, tokennative, brotli, t1, zlib, dictionary or none, not %q", *algo)
		}
		opt.Algorithm = a
	}
	var err error
	if opt.Encoding, err = parseEncoding(*encoding); err != nil {
		return err
	}
	opt.Binary = *binary
	if opt.Security, err = parseSecurity("security", *securityMode); err != nil {
		return err
	}
	if opt.Key, err = readKey(*keyHex, *keyFile, opt.Security != frame.SecurityNone, opt.Security); err != nil {
		return err
	}
	switch {
	case opt.Security != frame.SecurityNone && opt.Key == nil:
		return usagef("--security %s needs a key: --key-file FILE or $%s", *securityMode, keyEnvVar)
	case opt.Security == frame.SecurityNone && opt.Key != nil:
		return usagef("%s protects nothing without --security hmac or aead", keyFlagGiven(*keyHex, *keyFile))
	case !opt.Auto && opt.Security != frame.SecurityNone && opt.Algorithm != codec.M2M:
		return usagef("--security is carried by M2M v1 frames only: use --algo m2m or auto, not %s", *algo)
	case !opt.Auto && opt.Binary && opt.Algorithm != codec.M2M && opt.Algorithm != codec.TokenNative:
		return usagef("--binary exists for --algo m2m and tokennative only, not %s", *algo)
	}
	warnKeyFlag(*keyHex, stderr)
	in, err := readInput(stdin)
	if err != nil {
		return err
	}
	c := codec.New(codec.Config{Tokens: tokennative.Config{Llama3Path: llamaPath(*llama)}})
	out, info, err := c.Encode(nil, in, opt)
	if err != nil {
		return inputError(err)
	}
	if opt.Auto && opt.Binary && info.Algorithm == codec.TokenNative {
		// The one binary shape of text that is not JSON has no prefix:
		// a plain decompress would pass it through as it is.
		return errors.New("stdin is not JSON, and the only binary shape of other text is TokenNative's, which has no prefix that decompress could recognise: drop --binary (the text form round-trips), or pass --algo tokennative --binary and decompress with --algo tokennative")
	}
	if info.Algorithm == codec.T1 && !*lossy {
		back, _, err := c.Decode(nil, out, codec.DecodeOptions{})
		if err != nil || !bytes.Equal(back, in) {
			return errors.New("--algo t1 would change this document (t1 renames keys, drops nulls and rounds numbers): pass --lossy to accept, or use another --algo")
		}
	}
	if *verbose {
		fmt.Fprintf(stderr, "algorithm %s", info.Algorithm)
		if info.Reason != "" {
			fmt.Fprintf(stderr, " (%s)", info.Reason)
		}
		fmt.Fprintf(stderr, ": %d bytes in, %d bytes out (%.2fx)\n", len(in), len(out), float64(len(in))/float64(max(len(out), 1)))
	}
	_, err = stdout.Write(out)
	return err
}

func runDecompress(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("decompress", `decompress [flags] < wire > out.json

Detects the wire form (text or binary) and writes the original content byte for
byte. Input with no known prefix is passed through unchanged, as the protocol
says, unless --strict. The binary TokenNative shape has no prefix: name it
with --algo tokennative.`, stderr)
	keyHex := fs.String("key", "", "`hex` key for HMAC or AEAD frames; visible in ps: prefer --key-file or $"+keyEnvVar)
	keyFile := fs.String("key-file", "", "`file` holding the hex key for HMAC or AEAD frames; default $"+keyEnvVar)
	algo := fs.String("algo", "auto", "`form`: auto (detect), or tokennative for the prefix-less binary TokenNative shape")
	encoding := fs.String("encoding", "", "with --algo tokennative: the `tokenizer` the data must name (cl100k, o200k, llama)")
	llama := fs.String("llama3-vocab", "", "Llama 3 vocabulary `path` for --encoding llama: a folder with encoder.json, or Meta's tokenizer.model;\ndefault $M2MD_LLAMA3_VOCAB. m2md does not ship it: "+llamaVocabSource)
	strict := fs.Bool("strict", false, "fail on input that is no known wire form instead of passing it through")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	key, err := readKey(*keyHex, *keyFile, true, frame.SecurityNone)
	if err != nil {
		return err
	}
	var opt codec.DecodeOptions
	opt.Key = key
	switch *algo {
	case "auto":
	case "tokennative":
		opt.TokenNativeBinary = true
	default:
		return usagef("--algo must be auto or tokennative, not %q", *algo)
	}
	var want tokennative.Encoding
	if *encoding != "" {
		if !opt.TokenNativeBinary {
			return usagef("--encoding goes with --algo tokennative")
		}
		if want, err = parseEncoding(*encoding); err != nil {
			return err
		}
	}
	warnKeyFlag(*keyHex, stderr)
	in, err := readInput(stdin)
	if err != nil {
		return err
	}
	in = trimTextNewline(in)
	c := codec.New(codec.Config{Tokens: tokennative.Config{Llama3Path: llamaPath(*llama)}})
	out, info, err := c.Decode(nil, in, opt)
	if err != nil {
		return inputError(err)
	}
	if *strict && info.Algorithm == codec.None {
		return errors.New("stdin is no known wire form (--strict)")
	}
	if *encoding != "" && info.Encoding != want {
		return fmt.Errorf("data is tokenized with %s, not %s", info.Encoding, want)
	}
	_, err = stdout.Write(out)
	return err
}

// trimTextNewline drops one trailing line break from a text wire form (an
// `echo` or an editor adds it; no text form ends with one). Binary shapes
// and unprefixed content are left exactly as they are.
func trimTextNewline(in []byte) []byte {
	if !bytes.HasPrefix(in, []byte("#")) || (bytes.HasPrefix(in, []byte(frame.Prefix)) && codec.IsBinaryM2M(in)) {
		return in
	}
	in = bytes.TrimSuffix(in, []byte("\n"))
	return bytes.TrimSuffix(in, []byte("\r"))
}

// headerJSON is what `m2md inspect` prints for an M2M v1 frame.
type headerJSON struct {
	Form        string   `json:"form"`
	Shape       string   `json:"shape"`
	Schema      string   `json:"schema"`
	Security    string   `json:"security"`
	Compressed  bool     `json:"compressed"`
	Flags       []string `json:"flags"`
	HeaderLen   int      `json:"header_len"`
	Sequence    uint64   `json:"sequence,omitempty"`
	Channel     uint32   `json:"channel,omitempty"`
	Model       string   `json:"model"`
	MsgCount    *uint32  `json:"msg_count,omitempty"`
	Roles       []string `json:"roles,omitempty"`
	ContentHint *uint32  `json:"content_hint,omitempty"`
	MaxTokens   *uint32  `json:"max_tokens,omitempty"`
	ID          *string  `json:"id,omitempty"`
	Finish      string   `json:"finish_reason,omitempty"`
	Prompt      *uint32  `json:"prompt_tokens,omitempty"`
	Completion  *uint32  `json:"completion_tokens,omitempty"`
	Cached      uint32   `json:"cached_tokens,omitempty"`
	Reasoning   uint32   `json:"reasoning_tokens,omitempty"`
	EstCost     *float32 `json:"est_cost_usd,omitempty"`
	PayloadLen  *uint32  `json:"payload_len,omitempty"`
	CRC32       string   `json:"crc32,omitempty"`
	WireBytes   int      `json:"wire_bytes"`
	Misaligned  bool     `json:"routing_misaligned,omitempty"`
}

var schemaNames = map[frame.Schema]string{
	frame.SchemaRequest: "request", frame.SchemaResponse: "response", frame.SchemaStream: "stream",
	frame.SchemaEmbeddingRequest: "embedding_request", frame.SchemaEmbeddingResponse: "embedding_response",
	frame.SchemaError: "error", frame.SchemaCustom: "custom",
}

func runInspect(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", "inspect < frame\n\nPrints the readable header of an M2M v1 frame (text or binary, any security mode) as JSON,\nwithout a key and without decompressing. Other wire forms print their form and size.", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	in, err := readInput(stdin)
	if err != nil {
		return err
	}
	in = trimTextNewline(in)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if !bytes.HasPrefix(in, []byte(frame.Prefix)) {
		return enc.Encode(otherForm(in))
	}
	var h frame.Header
	out := headerJSON{Form: "m2m", Shape: "text", WireBytes: len(in)}
	if codec.IsBinaryM2M(in) {
		out.Shape = "binary"
		err = frame.ReadHeader(in, &h)
	} else {
		err = frame.ReadTextHeader(in, &h)
	}
	if err != nil {
		return err
	}
	fillHeader(&out, &h)
	return enc.Encode(out)
}

func fillHeader(out *headerJSON, h *frame.Header) {
	out.Schema = schemaNames[h.Schema]
	if out.Schema == "" {
		out.Schema = fmt.Sprintf("unknown(%#02x)", byte(h.Schema))
	}
	out.Security = h.Security.String()
	out.Compressed = h.Flags.Compressed()
	out.HeaderLen = h.HeaderLen
	out.Sequence, out.Channel = h.Sequence, h.Channel
	out.Model = string(h.Model)
	out.Misaligned = h.RoutingMisaligned
	out.Flags = flagNames(h)
	if h.HasEstCost {
		c := h.EstCost
		out.EstCost = &c
	}
	if h.PayloadKnown {
		pl := h.PayloadLen
		out.PayloadLen = &pl
		out.CRC32 = fmt.Sprintf("%08x", h.CRC)
	}
	switch h.Schema {
	case frame.SchemaRequest, frame.SchemaEmbeddingRequest:
		mc, ch := h.MsgCount, h.ContentHint
		out.MsgCount, out.ContentHint = &mc, &ch
		for i := 0; i < h.RoleCount(); i++ {
			if r, ok := h.Role(i); ok {
				out.Roles = append(out.Roles, r.String())
			}
		}
		if h.HasMaxTokens {
			mt := h.MaxTokens
			out.MaxTokens = &mt
		}
	case frame.SchemaResponse, frame.SchemaEmbeddingResponse, frame.SchemaError:
		id := string(h.ID)
		p, c := h.PromptTokens, h.CompletionTokens
		out.ID, out.Prompt, out.Completion = &id, &p, &c
		out.Finish = h.FinishReason.String()
		out.Cached, out.Reasoning = h.CachedTokens, h.ReasoningTokens
	}
}

func flagNames(h *frame.Header) []string {
	f := h.Flags
	names := []string{}
	add := func(ok bool, name string) {
		if ok {
			names = append(names, name)
		}
	}
	switch h.Schema {
	case frame.SchemaRequest, frame.SchemaEmbeddingRequest:
		add(f.HasSystemPrompt(), "system_prompt")
		add(f.HasTools(), "tools")
		add(f.HasToolChoice(), "tool_choice")
		add(f.HasImages(), "images")
		add(f.StreamRequested(), "stream")
		add(f.HasResponseFormat(), "response_format")
		add(f.HasMaxTokens(), "max_tokens")
		add(f.HasReasoningEffort(), "reasoning_effort")
		add(f.HasServiceTier(), "service_tier")
		add(f.HasSeed(), "seed")
		add(f.HasLogprobs(), "logprobs")
		add(f.HasUserID(), "user")
		add(f.HasTemperature(), "temperature")
		add(f.HasTopP(), "top_p")
		add(f.HasStop(), "stop")
	case frame.SchemaResponse, frame.SchemaEmbeddingResponse, frame.SchemaError:
		add(f.HasToolCalls(), "tool_calls")
		add(f.HasRefusal(), "refusal")
		add(f.ContentFiltered(), "content_filtered")
		add(f.HasUsage(), "usage")
		add(f.Truncated(), "truncated")
		add(f.HasCachedTokens(), "cached_tokens")
		add(f.HasReasoningTokens(), "reasoning_tokens")
		add(f.HasCostEstimate(), "cost_estimate")
	}
	add(f.Compressed(), "compressed")
	return names
}

// otherForm describes a wire form that has no readable header.
func otherForm(in []byte) map[string]any {
	form := "passthrough"
	switch {
	case bytes.HasPrefix(in, []byte(tokennative.TextPrefix)):
		form = "tokennative"
		if len(in) > 4 {
			if e, err := tokennative.EncodingFromChar(in[4]); err == nil {
				return map[string]any{"form": form, "shape": "text", "encoding": e.String(), "wire_bytes": len(in)}
			}
		}
	case bytes.HasPrefix(in, []byte("#M2M[v3.0]|")):
		form = "brotli"
	case bytes.HasPrefix(in, []byte("#T1|")):
		form = "t1"
	case bytes.HasPrefix(in, []byte("#M2M[v2.0]|")):
		form = "zlib"
	case bytes.HasPrefix(in, []byte("#M2M|")):
		form = "dictionary"
	}
	return map[string]any{"form": form, "wire_bytes": len(in)}
}
