#!/usr/bin/env bash
# make demo: an embedded NATS server and a worker in a temporary data
# directory, one message published, its reply streamed, then a clean stop.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d "${TMPDIR:-/tmp}/lanefleet-demo.XXXXXX")
port=${DEMO_PORT:-$(( 20000 + RANDOM % 20000 ))}
url="nats://127.0.0.1:${port}"
log="$dir/worker.log"
worker_pid=""

cleanup() {
	if [[ -n "$worker_pid" ]] && kill -0 "$worker_pid" 2>/dev/null; then
		kill -TERM "$worker_pid" 2>/dev/null || true
		wait "$worker_pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

model_flag=()
# A provider's key, Google's application default credentials (Vertex AI),
# Azure OpenAI's key, token or service principal, or the AWS chain (a
# profile, a region, keys, web identity, a Bedrock API key: the worker then
# picks Bedrock).
if [[ -z "${ANTHROPIC_API_KEY:-}${ANTHROPIC_OAUTH_TOKEN:-}${OPENAI_API_KEY:-}${GEMINI_API_KEY:-}${GOOGLE_API_KEY:-}${OPENROUTER_API_KEY:-}${MISTRAL_API_KEY:-}${AZURE_OPENAI_API_KEY:-}${AZURE_OPENAI_AD_TOKEN:-}${AZURE_CLIENT_SECRET:-}${GROQ_API_KEY:-}${XAI_API_KEY:-}${DEEPSEEK_API_KEY:-}${TOGETHER_API_KEY:-}${FIREWORKS_API_KEY:-}${CEREBRAS_API_KEY:-}${MOONSHOT_API_KEY:-}${ZAI_API_KEY:-}${GOOGLE_APPLICATION_CREDENTIALS:-}${AWS_PROFILE:-}${AWS_REGION:-}${AWS_DEFAULT_REGION:-}${AWS_ACCESS_KEY_ID:-}${AWS_WEB_IDENTITY_TOKEN_FILE:-}${AWS_BEARER_TOKEN_BEDROCK:-}" ]]; then
	echo "== no API key or cloud credentials set: using the built-in scripted/echo model"
	model_flag=(--scripted --model scripted/echo --scripted-delay 60ms)
fi

echo "== starting a worker with an embedded NATS server on ${url} (data in ${dir})"
./bin/worker --data-dir "$dir/data" --listen "127.0.0.1:${port}" --log-format console "${model_flag[@]}" >"$log" 2>&1 &
worker_pid=$!

for _ in $(seq 1 100); do
	if grep -q '"ready"\|ready' "$log" 2>/dev/null; then break; fi
	if ! kill -0 "$worker_pid" 2>/dev/null; then cat "$log"; echo "worker exited"; exit 1; fi
	sleep 0.1
done
grep -q 'ready' "$log" || { cat "$log"; echo "worker not ready"; exit 1; }

text="Hello from the Lanefleet demo: one lane, one turn, streamed back token by token."
echo "== publisher send --session demo:alice \"$text\""
NATS_URL="$url" ./bin/publisher send --session "demo:alice" "$text"

echo "== publisher history --session demo:alice"
NATS_URL="$url" ./bin/publisher history --session "demo:alice"

echo "== stopping the worker"
kill -TERM "$worker_pid"
wait "$worker_pid"
worker_pid=""
echo "== worker log"
cat "$log"
echo "== demo finished"
