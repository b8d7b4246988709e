package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/session"
)

// CodeActionNotFound answers a run of an action that is not installed, or
// whose connector or operation is gone (broken).
const CodeActionNotFound = contract.CodeActionNotFound

// ActionRunRequest is the body of POST /v1/actions/{name}/run, the contract
// of generated action shims.
type ActionRunRequest struct {
	// Args are the action's declared inputs; they are merged over the
	// action's [execute.args].
	Args map[string]any `json:"args,omitempty"`
	// APIToken is the session's API token for a client that sends no
	// Authorization header (BusyBox wget shims), as in RunRequest.
	APIToken string `json:"api_token,omitempty"`
}

// runAction is POST /v1/actions/{name}/run: the args are checked against
// the action's inputs and merged with its presets, then the call takes the
// run endpoint's path through the proxy, held for approval when the action
// requires it. One action.run event records the outcome.
func (s *Server) runAction(c echo.Context) error {
	sess := sessionFrom(c)
	name := c.Param("name")
	var req ActionRunRequest
	if err := decodeJSON(c.Request(), &req); err != nil {
		return err
	}
	var active map[string]actions.Installed
	if s.cfg.Actions != nil {
		active = s.cfg.Actions()
	}
	inst, ok := active[name]
	if !ok {
		names := make([]string, 0, len(active))
		for n := range active {
			names = append(names, n)
		}
		sort.Strings(names)
		e := apiErr(http.StatusNotFound, CodeActionNotFound,
			fmt.Sprintf("action %q is not installed or is broken (see \"aileron-proxy action list\"); installed actions: %s", name, listOrNone(names))).
			with("available_actions", names)
		return s.actionRun(sess, name, inst, e)
	}
	act := inst.Action
	args, problems := act.Merge(req.Args)
	if len(problems) > 0 {
		out := make([]ArgProblem, len(problems))
		for i, p := range problems {
			out[i] = ArgProblem{Arg: p.Arg, Message: p.Message}
		}
		return s.actionRun(sess, name, inst, invalidArgs("action "+name, out))
	}
	err := s.run(c, sess, inst.Target.ConnectorFQN, inst.Target.Tool, inst.Target.Operation.Name, args,
		outbound{action: name, approval: act.ApprovalRequired, preview: actionPreview(inst)})
	if err == nil {
		_ = s.actionRun(sess, name, inst, nil, c.Response().Status)
		return nil
	}
	return s.actionRun(sess, name, inst, err)
}

// actionRun records the action.run event of a run that ended with err (nil
// for a 200 with status[0]) and returns err. Argument values are never
// recorded; the proxy's own event carries the fields the operation's audit
// rules allow.
func (s *Server) actionRun(sess *session.Session, name string, inst actions.Installed, err error, status ...int) error {
	ev := audit.Event{Event: audit.EventActionRun, SessionID: sess.ID, Action: name, Source: SourceRunEndpoint, Decision: contract.DecisionAllowed}
	if inst.Action != nil {
		ev.ConnectorFQN, ev.Tool = inst.Target.ConnectorFQN, inst.Target.Tool
		if inst.Target.Operation != nil {
			ev.Operation = inst.Target.Operation.Name
		}
	}
	if len(status) > 0 {
		ev.Status = status[0]
	}
	var e *Error
	if errors.As(err, &e) {
		ev.Status, ev.Decision, ev.Reason = e.Status, contract.DecisionDenied, e.Code.String()
	} else if err != nil {
		ev.Decision = "error"
	}
	s.cfg.Audit.Record(ev)
	return err
}

// actionPreview maps an action's [approval.preview] and its input labels
// onto the proxy's preview mechanism: "${args.<input>}" becomes the place
// the run endpoint puts that input in the held request (a path template,
// else the JSON body or the query), so the fetch reads the request that is
// actually held. Nil when the action has neither.
func actionPreview(inst actions.Installed) *preview.Directive {
	act := inst.Action
	d := &preview.Directive{Tool: inst.Target.Tool}
	for _, in := range act.Inputs {
		if in.Label != "" || in.Multiline {
			if d.Labels == nil {
				d.Labels = map[string]preview.Label{}
			}
			d.Labels[in.Name] = preview.Label{Text: in.Label, Multiline: in.Multiline}
		}
	}
	if pv := act.Preview; pv != nil && inst.Target.Operation != nil {
		op := inst.Target.Operation
		d.Operation, d.Render, d.Args = pv.Op, pv.Render, map[string]string{}
		for k, v := range pv.Args {
			str, isString := v.(string)
			name, isRef := strings.CutPrefix(str, "${args.")
			name, closed := strings.CutSuffix(name, "}")
			switch {
			case isString && isRef && closed && strings.Contains(op.Path, "{"+name+"}"):
				d.Args[k] = "{path." + name + "}"
			case isString && isRef && closed && sendsBody(op.Method):
				d.Args[k] = "{body." + name + "}"
			case isString && isRef && closed:
				d.Args[k] = "{query." + name + "}"
			case isString:
				d.Args[k] = str
			default:
				b, _ := json.Marshal(v)
				d.Args[k] = string(b)
			}
		}
	}
	if d.Operation == "" && d.Labels == nil {
		return nil
	}
	return d
}
