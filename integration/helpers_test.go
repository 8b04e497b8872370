package integration

import (
	"encoding/json"

	"github.com/m2md/m2md/internal/testkit"
)

// errorCode extracts error.code from an error frame's JSON body.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "?"
	}
	return e.Error.Code
}

// corpus reads a file of the test corpus.
var corpus = testkit.CorpusFile
