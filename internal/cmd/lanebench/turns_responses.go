package main

// responsesReply is the mock's "pong" in the Responses stream
// (-turns-api openai-responses).
var responsesReply = []byte("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"},\"output_index\":0,\"sequence_number\":1}\n\n" +
	"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":\"" + turnsReplyText + "\",\"item_id\":\"msg_1\",\"output_index\":0,\"sequence_number\":2}\n\n" +
	"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"" + turnsReplyText + "\",\"annotations\":[]}],\"role\":\"assistant\"},\"output_index\":0,\"sequence_number\":3}\n\n" +
	"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1,\"total_tokens\":13}}}\n\n")
