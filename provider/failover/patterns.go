package failover

import (
	"regexp"
	"strconv"
	"strings"
)

// pattern is a substring (matched against lower-cased text) or a regexp.
type pattern struct {
	sub string
	re  *regexp.Regexp
}

func sub(s string) pattern   { return pattern{sub: s} }
func re(expr string) pattern { return pattern{re: regexp.MustCompile(expr)} }
func matchAny(lower string, ps []pattern) bool {
	if lower == "" {
		return false
	}
	for _, p := range ps {
		if p.re != nil {
			if p.re.MatchString(lower) {
				return true
			}
		} else if strings.Contains(lower, p.sub) {
			return true
		}
	}
	return false
}

var (
	rateLimitPatterns = []pattern{
		re(`rate[_ ]limit|too many requests|429`),
		sub("model_cooldown"), sub("cooling down"), sub("exceeded your current quota"),
		sub("resource has been exhausted"), sub("quota exceeded"), sub("resource_exhausted"),
		sub("usage limit"), sub("tpm"), sub("tokens per minute"),
	}
	overloadedPatterns = []pattern{
		re(`overloaded_error|"type"\s*:\s*"overloaded_error"`),
		sub("overloaded"), sub("service unavailable"), sub("high demand"),
	}
	timeoutPatterns = []pattern{
		sub("timeout"), sub("timed out"), sub("deadline exceeded"), sub("context deadline exceeded"),
		re(`without sending (any )?chunks?`), re(`\bstop reason:\s*abort\b`),
		re(`\breason:\s*abort\b`), re(`\bunhandled stop reason:\s*abort\b`),
	}
	billingPatterns = []pattern{
		{re: billingHard402},
		sub("payment required"), sub("insufficient credits"), sub("credit balance"),
		sub("plans & billing"), sub("insufficient balance"),
	}
	authPermanentPatterns = []pattern{
		re(`api[_ ]?key[_ ]?(?:revoked|invalid|deactivated|deleted)`),
		re(`could not (?:authenticate|validate).*(?:api[_ ]?key|credentials)`),
		sub("invalid_api_key"), sub("key has been disabled"), sub("key has been revoked"),
		sub("account has been deactivated"),
	}
	authPatterns = []pattern{
		re(`invalid[_ ]?api[_ ]?key`), re(`missing scopes?:`), re(`\b401\b`), re(`\b403\b`),
		sub("incorrect api key"), sub("invalid token"), sub("authentication"), sub("re-authenticate"),
		sub("oauth token refresh failed"), sub("unauthorized"), sub("forbidden"), sub("access denied"),
		sub("insufficient permissions"), sub("insufficient permission"), sub("expired"),
		sub("token has expired"), sub("no credentials found"), sub("no api key found"),
	}
	formatPatterns = []pattern{
		sub("string should match pattern"), sub("tool_use.id"), sub("tool_use_id"),
		sub("messages.1.content.1.tool_use.id"), sub("invalid request format"),
		re(`tool call id was.*must be`),
	}

	billingHard402 = regexp.MustCompile(`["']?(?:status|code)["']?\s*[:=]\s*402\b|\bhttp\s*402\b|\berror(?:\s+code)?\s*[:=]?\s*402\b|\b(?:got|returned|received)\s+(?:a\s+)?402\b|^\s*402\s+payment`)
	billingHead    = regexp.MustCompile(`^(?:error[:\s-]+)?billing(?:\s+error)?(?:[:\s-]+|$)|^(?:error[:\s-]+)?(?:credit balance|insufficient credits?|payment required|http\s*402\b)`)

	modelNotFound404 = regexp.MustCompile(`\b404\b`)
	notFoundWord     = regexp.MustCompile(`not[-_ ]?found`)
	modelsIsNotFound = regexp.MustCompile(`models/\S+ is not found`)

	leadingStatus = regexp.MustCompile(`(?is)^(?:http\s*)?(\d{3})(?:\s+(.+))?$`)
	httpStatusRe  = regexp.MustCompile(`(?i)^(?:http\s*)?(\d{3})\s+(.+)$`)
	htmlStart     = regexp.MustCompile(`(?i)^\s*(?:<!doctype\s+html\b|<html\b)`)

	imageDimensionRe     = regexp.MustCompile(`(?i)image dimensions exceed max allowed size for many-image requests:\s*(\d+)\s*pixels`)
	imageDimensionPathRe = regexp.MustCompile(`(?i)messages\.(\d+)\.content\.(\d+)\.image`)
	imageSizeRe          = regexp.MustCompile(`(?i)image exceeds\s*(\d+(?:\.\d+)?)\s*mb`)

	missingToolInputRe = regexp.MustCompile(`tool_(?:use|call)\.(?:input|arguments).*required|messages\.\d+\.content\.\d+\.tool_(?:use|call)\.(?:input|arguments)`)
	roleOrderingRe     = regexp.MustCompile(`(?i)incorrect role information|roles must alternate|400.*role|"message".*role.*information`)

	contextWindowTooSmall = regexp.MustCompile(`(?i)context window.*(too small|minimum is)`)
	overflowHint          = regexp.MustCompile(`(?i)context.*overflow|context window.*(too (?:large|long)|exceed|over|limit|max(?:imum)?|requested|sent|tokens)|prompt.*(too (?:large|long)|exceed|over|limit|max(?:imum)?)|(?:request|input).*(?:context|window|length|token).*(too (?:large|long)|exceed|over|limit|max(?:imum)?)`)
	rateLimitHint         = regexp.MustCompile(`(?i)rate limit|too many requests|requests per (?:minute|hour|day)|quota|throttl|429\b`)
)

// transientStatuses are leading HTTP statuses the reference treats as
// transient (failover reason timeout).
var transientStatuses = map[int]bool{500: true, 502: true, 503: true, 504: true, 521: true, 522: true, 523: true, 524: true, 529: true}

// cloudflareStatuses are statuses whose body is a Cloudflare error page.
var cloudflareStatuses = map[int]bool{521: true, 522: true, 523: true, 524: true, 525: true, 526: true, 530: true}

// billingMaxLen is the length above which only the hard-402 markers count as
// billing, so long texts that merely mention credits are not misread.
const billingMaxLen = 512

func lower(s string) string { return strings.ToLower(s) }

// IsRateLimit reports whether text reads as a rate limit or quota error.
func IsRateLimit(text string) bool { return matchAny(lower(text), rateLimitPatterns) }

// IsOverloaded reports whether text reads as an overloaded service.
func IsOverloaded(text string) bool { return matchAny(lower(text), overloadedPatterns) }

// IsTimeout reports whether text reads as a timeout.
func IsTimeout(text string) bool { return matchAny(lower(text), timeoutPatterns) }

// IsAuthPermanent reports whether text says the credential itself is invalid,
// revoked or disabled.
func IsAuthPermanent(text string) bool { return matchAny(lower(text), authPermanentPatterns) }

// IsAuth reports whether text reads as an authentication or permission error.
func IsAuth(text string) bool { return matchAny(lower(text), authPatterns) }

// IsBilling reports whether text reads as a billing or payment error. Texts
// longer than 512 bytes count only with an explicit 402 marker.
func IsBilling(text string) bool {
	l := lower(text)
	if l == "" {
		return false
	}
	if len(text) > billingMaxLen {
		return billingHard402.MatchString(l)
	}
	if matchAny(l, billingPatterns) {
		return true
	}
	if !billingHead.MatchString(l) {
		return false
	}
	return strings.Contains(l, "upgrade") || strings.Contains(l, "credits") ||
		strings.Contains(l, "payment") || strings.Contains(l, "plan")
}

// IsFormat reports whether text says the request was rejected for its shape
// (tool call id pattern and similar). Image dimension errors are never format
// errors.
func IsFormat(text string) bool {
	if IsImageDimension(text) {
		return false
	}
	return matchAny(lower(text), formatPatterns)
}

// IsModelNotFound reports whether text says the model does not exist.
func IsModelNotFound(text string) bool {
	l := lower(text)
	if l == "" {
		return false
	}
	switch {
	case strings.Contains(l, "unknown model"), strings.Contains(l, "model not found"),
		strings.Contains(l, "model_not_found"), strings.Contains(l, "not_found_error"):
		return true
	case strings.Contains(l, "does not exist") && strings.Contains(l, "model"):
		return true
	case strings.Contains(l, "invalid model") && !strings.Contains(l, "invalid model reference"):
		return true
	case modelsIsNotFound.MatchString(l):
		return true
	case modelNotFound404.MatchString(l) && notFoundWord.MatchString(l):
		return true
	}
	return false
}

// LeadingStatus returns the HTTP status a text starts with ("500 Internal
// Server Error", "HTTP 429 …") and the rest of the text.
func LeadingStatus(text string) (status int, rest string, ok bool) {
	m := leadingStatus.FindStringSubmatch(strings.TrimSpace(text))
	if m == nil {
		return 0, "", false
	}
	n, _ := strconv.Atoi(m[1])
	if n < 100 || n > 599 {
		return 0, "", false
	}
	return n, strings.TrimSpace(m[2]), true
}

// IsTransientHTTP reports whether text starts with a transient HTTP status
// (500, 502, 503, 504, 521–524, 529).
func IsTransientHTTP(text string) bool {
	n, _, ok := LeadingStatus(text)
	return ok && transientStatuses[n]
}

// IsHTMLErrorPage reports whether text is a 5xx status followed by an HTML
// error page (or a Cloudflare origin error status).
func IsHTMLErrorPage(text string) bool {
	n, rest, ok := LeadingStatus(text)
	if !ok || n < 500 {
		return false
	}
	if cloudflareStatuses[n] {
		return true
	}
	return n < 600 && htmlStart.MatchString(rest) && strings.Contains(lower(rest), "</html>")
}

// isJSONInternalError reports an Anthropic-style api_error "Internal server error" body.
func isJSONInternalError(text string) bool {
	l := lower(text)
	return strings.Contains(l, `"type":"api_error"`) && strings.Contains(l, "internal server error")
}

// ImageDimension describes an "image dimensions exceed max allowed size"
// rejection. Each field is -1 when the text does not name it.
type ImageDimension struct {
	MaxDimensionPx int
	MessageIndex   int
	ContentIndex   int
}

// IsImageDimension reports whether text is an image dimension rejection.
func IsImageDimension(text string) bool {
	return strings.Contains(lower(text), "image dimensions exceed max allowed size")
}

// ParseImageDimension parses an image dimension rejection.
func ParseImageDimension(text string) (ImageDimension, bool) {
	if !IsImageDimension(text) {
		return ImageDimension{}, false
	}
	d := ImageDimension{MaxDimensionPx: -1, MessageIndex: -1, ContentIndex: -1}
	if m := imageDimensionRe.FindStringSubmatch(text); m != nil {
		d.MaxDimensionPx, _ = strconv.Atoi(m[1])
	}
	if m := imageDimensionPathRe.FindStringSubmatch(text); m != nil {
		d.MessageIndex, _ = strconv.Atoi(m[1])
		d.ContentIndex, _ = strconv.Atoi(m[2])
	}
	return d, true
}

// IsImageSize reports whether text is an "image exceeds N MB" rejection.
func IsImageSize(text string) bool {
	l := lower(text)
	return strings.Contains(l, "image exceeds") && strings.Contains(l, "mb")
}

// ParseImageSize returns the megabyte limit of an image size rejection (0
// when the text names none).
func ParseImageSize(text string) (maxMB float64, ok bool) {
	if !IsImageSize(text) {
		return 0, false
	}
	if m := imageSizeRe.FindStringSubmatch(text); m != nil {
		maxMB, _ = strconv.ParseFloat(m[1], 64)
	}
	return maxMB, true
}

// IsMissingToolCallInput reports whether text says a tool call in the
// history lacks its input (a corrupted transcript).
func IsMissingToolCallInput(text string) bool { return missingToolInputRe.MatchString(lower(text)) }

// IsRoleOrdering reports whether text says the messages' roles are out of
// order (e.g. "roles must alternate").
func IsRoleOrdering(text string) bool { return roleOrderingRe.MatchString(text) }

// IsReasoningRequired reports whether text says the endpoint cannot run with
// reasoning off.
func IsReasoningRequired(text string) bool {
	l := lower(text)
	return strings.Contains(l, "reasoning is mandatory") || strings.Contains(l, "reasoning is required") ||
		strings.Contains(l, "requires reasoning") ||
		(strings.Contains(l, "reasoning") && strings.Contains(l, "cannot be disabled"))
}

func hasTPMHint(l string) bool {
	return strings.Contains(l, "tpm") || strings.Contains(l, "tokens per minute")
}

// IsContextOverflow reports whether text is a context-window overflow by the
// reference's strict list. Texts mentioning tokens-per-minute ("tpm") and
// reasoning-required errors never are.
func IsContextOverflow(text string) bool {
	if text == "" {
		return false
	}
	l := lower(text)
	if hasTPMHint(l) || IsReasoningRequired(text) {
		return false
	}
	c := func(s string) bool { return strings.Contains(l, s) }
	sizeWindow := c("request size exceeds") && (c("context window") || c("context length") || c("maximum context length"))
	return c("request_too_large") || c("request exceeds the maximum size") || c("context length exceeded") ||
		c("maximum context length") || c("prompt is too long") || c("exceeds model context window") ||
		c("model token limit") || sizeWindow || c("context overflow:") || c("exceed context limit") ||
		c("exceeds the model's maximum context") ||
		(c("max_tokens") && c("exceed") && c("context")) ||
		(c("input length") && c("exceed") && c("context")) ||
		(c("413") && c("too large")) ||
		strings.Contains(text, "上下文过长") || strings.Contains(text, "上下文超出") ||
		strings.Contains(text, "上下文长度超") || strings.Contains(text, "超出最大上下文") ||
		strings.Contains(text, "请压缩上下文")
}

// IsLikelyContextOverflow is the run loop's broader overflow test: the strict
// list plus a heuristic, minus rate limits and "context window too small".
func IsLikelyContextOverflow(text string) bool {
	if text == "" {
		return false
	}
	l := lower(text)
	if hasTPMHint(l) || IsReasoningRequired(text) || contextWindowTooSmall.MatchString(text) || IsRateLimit(text) {
		return false
	}
	if IsContextOverflow(text) {
		return true
	}
	if rateLimitHint.MatchString(text) {
		return false
	}
	return overflowHint.MatchString(text)
}

// IsCompactionFailure reports whether text is a failed compaction of an
// overflowing context.
func IsCompactionFailure(text string) bool {
	l := lower(text)
	if !(strings.Contains(l, "summarization failed") || strings.Contains(l, "auto-compaction") ||
		strings.Contains(l, "compaction failed") || strings.Contains(l, "compaction")) {
		return false
	}
	return IsLikelyContextOverflow(text) || strings.Contains(l, "context overflow")
}

// Lanefleet additions: provider wordings of a context overflow the
// reference's lists miss (it has no failover reason for them either).
var extraOverflow = []pattern{
	sub("exceeds the context window"), sub("context_length_exceeded"), sub("context window exceeded"),
	sub("context_window_exceeded"), sub("prompt too long"),
	re(`input token count.*exceeds the maximum`), re(`input tokens exceed the configured limit`),
	re(`input exceeds.*maximum number of tokens`),
	sub("input is too long for requested model"), sub("too many input tokens"),
}
