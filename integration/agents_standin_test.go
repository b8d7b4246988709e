package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// cannedReply is what every model stand-in answers; the agent must print it.
const cannedReply = "AILERON-CANNED-REPLY-4217"

// modelStandIn answers like the model APIs the agents call (Anthropic
// Messages, OpenAI Responses and Chat Completions, Gemini generateContent),
// streaming in each provider's wire format, always with cannedReply. The
// real APIs are not reachable from CI; serve's --resolve maps their host
// names to this loopback server.
func modelStandIn() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if r.Method == http.MethodPost {
			_ = json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&body)
		}
		stream, _ := body["stream"].(bool)
		switch {
		case r.Host == "api.anthropic.com" && r.URL.Path == "/v1/messages/count_tokens":
			writeJSON(w, map[string]any{"input_tokens": 12})
		case r.Host == "api.anthropic.com" && r.URL.Path == "/v1/messages":
			anthropicMessage(w, body, stream)
		case r.Host == "api.anthropic.com" && strings.HasPrefix(r.URL.Path, "/api/claude_code/"):
			// Managed settings and policy limits: none for this organisation.
			http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"none"}}`, http.StatusNotFound)
		case r.Host == "api.anthropic.com" && strings.HasPrefix(r.URL.Path, "/v1/models"):
			writeJSON(w, map[string]any{"data": []any{map[string]any{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5", "created_at": "2025-09-29T00:00:00Z"}}, "has_more": false, "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"})
		case r.Host == "api.openai.com" && r.URL.Path == "/v1/responses" && r.Method == http.MethodPost:
			openAIResponse(w, body)
		case r.Host == "api.openai.com" && r.URL.Path == "/v1/responses":
			// The WebSocket handshake: refused, so the client falls back to HTTPS.
			http.Error(w, "websocket not offered by this stand-in", http.StatusUpgradeRequired)
		case r.Host == "api.openai.com" && r.URL.Path == "/v1/chat/completions":
			openAIChat(w, stream)
		case r.Host == "api.openai.com" && strings.HasPrefix(r.URL.Path, "/v1/models"):
			writeJSON(w, map[string]any{"object": "list", "data": []any{map[string]any{"id": "gpt-5-codex", "object": "model", "owned_by": "openai"}}, "models": []any{}})
		case r.Host == "generativelanguage.googleapis.com" && strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: %s\r\n\r\n", mustJSON(geminiResponse(cannedReply)))
		case r.Host == "generativelanguage.googleapis.com" && strings.HasSuffix(r.URL.Path, ":generateContent"):
			text := cannedReply
			if gc, _ := body["generationConfig"].(map[string]any); gc["responseMimeType"] == "application/json" {
				// Gemini CLI's model router asks for a JSON verdict.
				text = `{"reasoning": "stand-in", "model_choice": "flash"}`
			}
			writeJSON(w, geminiResponse(text))
		case r.Host == "generativelanguage.googleapis.com" && strings.HasSuffix(r.URL.Path, ":countTokens"):
			writeJSON(w, map[string]any{"totalTokens": 12})
		default:
			http.Error(w, `{"error":{"message":"not served by the stand-in"}}`, http.StatusNotFound)
		}
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(mustJSON(v))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// sse writes one server-sent event and flushes it.
func sse(w http.ResponseWriter, event string, data any) {
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", mustJSON(data))
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func anthropicMessage(w http.ResponseWriter, body map[string]any, stream bool) {
	model, _ := body["model"].(string)
	usage := map[string]any{"input_tokens": 12, "output_tokens": 6, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	msg := map[string]any{"id": "msg_standin", "type": "message", "role": "assistant", "model": model,
		"content": []any{map[string]any{"type": "text", "text": cannedReply}}, "stop_reason": "end_turn", "stop_sequence": nil, "usage": usage}
	if !stream {
		writeJSON(w, msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": start})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for _, part := range []string{cannedReply[:9], cannedReply[9:]} {
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": part}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 6}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

func openAIResponse(w http.ResponseWriter, body map[string]any) {
	model, _ := body["model"].(string)
	item := map[string]any{"id": "msg_standin", "type": "message", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": cannedReply, "annotations": []any{}}}}
	usage := map[string]any{"input_tokens": 12, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 6, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 18}
	resp := map[string]any{"id": "resp_standin", "object": "response", "created_at": 1700000000, "model": model, "status": "in_progress", "output": []any{}}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "response.created", map[string]any{"type": "response.created", "sequence_number": 0, "response": resp})
	added := map[string]any{"id": "msg_standin", "type": "message", "role": "assistant", "status": "in_progress", "content": []any{}}
	sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": added})
	sse(w, "response.output_text.delta", map[string]any{"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_standin", "output_index": 0, "content_index": 0, "delta": cannedReply})
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": item})
	done := map[string]any{}
	for k, v := range resp {
		done[k] = v
	}
	done["status"], done["output"], done["usage"] = "completed", []any{item}, usage
	sse(w, "response.completed", map[string]any{"type": "response.completed", "sequence_number": 4, "response": done})
}

func openAIChat(w http.ResponseWriter, stream bool) {
	if !stream {
		writeJSON(w, map[string]any{"id": "chatcmpl-standin", "object": "chat.completion", "created": 1700000000, "model": "gpt-5",
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": cannedReply}, "finish_reason": "stop"}}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "", map[string]any{"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-5",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": cannedReply}, "finish_reason": nil}}})
	sse(w, "", map[string]any{"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-5",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func geminiResponse(text string) map[string]any {
	return map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": 12, "candidatesTokenCount": 6, "totalTokenCount": 18},
		"modelVersion":  "gemini-2.5-flash",
	}
}
