package delta

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// turn is one request of a corpus conversation and the response its
// provider answered: the chat.completion wrapping the assistant message
// that the next turn carries (a canned one for the last turn), as
// `m2md bench conversation` answers.
type turn struct {
	name     string
	request  []byte
	response []byte
}

const corpusDir = "../testdata/corpus/conversations"

// conversations loads every conversation of the corpus, in turn order.
func conversations(t testing.TB) [][]turn {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(corpusDir, "conv-*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no conversations under %s: %v", corpusDir, err)
	}
	var convs [][]turn
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "turn-*.json"))
		if err != nil || len(files) < 2 {
			t.Fatalf("%s: %d turns, %v", dir, len(files), err)
		}
		var conv []turn
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			conv = append(conv, turn{name: filepath.Base(dir) + "/" + filepath.Base(f), request: b})
		}
		for i := range conv {
			asst := json.RawMessage(`{"role":"assistant","content":"That is all for today."}`)
			if i+1 < len(conv) {
				var next struct {
					Messages []json.RawMessage `json:"messages"`
				}
				if err := json.Unmarshal(conv[i+1].request, &next); err != nil || len(next.Messages) < 2 {
					t.Fatalf("%s: %v", conv[i+1].name, err)
				}
				asst = next.Messages[len(next.Messages)-2]
			}
			conv[i].response = []byte(fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","created":1732000000,"model":"gpt-4o","choices":[{"index":0,"message":%s,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
				i+1, asst, len(conv[i].request)/4, len(asst)/4, len(conv[i].request)/4+len(asst)/4))
		}
		convs = append(convs, conv)
	}
	return convs
}

func syncPool() sync.Pool { return sync.Pool{} }
