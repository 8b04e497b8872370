package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
	"github.com/m2md/m2md/negotiate"
)

// checkModel refuses a request the server must not get: one whose body
// names another model than the one it was routed by (a requester's own
// frame can say anything), or a model outside the models served
// (Config.Models, or else those Models discovered). A request addressed to
// the agent carries no routed model: its body's model must be one served,
// and while those are unknown it is refused. Otherwise the agent's key
// would pay for whatever model a requester writes in the body.
func (u *Upstream) checkModel(req *client.Request) (negotiate.ErrorCode, string, bool) {
	var sum jsonscan.Summary
	if err := sum.Scan(req.Body, jsonscan.Limits{}); err != nil || !sum.Model.IsString {
		return negotiate.CodeBadFrame, "the request body has no \"model\" string", false
	}
	model := string(sum.Model.AppendDecoded(nil))
	if req.Model != "" && model != req.Model {
		return negotiate.CodeBadFrame, fmt.Sprintf("the body's model %q is not the model %q the request was routed by", model, req.Model), false
	}
	served := u.served.Load()
	if served == nil && req.Model == "" {
		return negotiate.CodeNoRoute, fmt.Sprintf("model %q: the request names no model it was routed by, and the models served here are unknown (set Config.Models, or call Models)", model), false
	}
	if served != nil && !(*served)[model] {
		return negotiate.CodeNoRoute, fmt.Sprintf("model %q is not served here", model), false
	}
	return "", "", true
}

// serve makes ids the models served.
func (u *Upstream) serve(ids []string) {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	u.served.Store(&m)
}

// lacksAPI reports that the server has no endpoint for the request's API:
// it answered 404 or 405 to a Responses or legacy completions request
// with a body that is not OpenAI's error JSON (a server's own "404 page
// not found"; a server that has the endpoint answers an unknown model in
// OpenAI's shape, passed on as it is).
func (u *Upstream) lacksAPI(req *client.Request, status int, body []byte) bool {
	if req.Embeddings || req.API == frame.APIChat || (status != http.StatusNotFound && status != http.StatusMethodNotAllowed) {
		return false
	}
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(body, &e) != nil || len(e.Error) == 0
}
