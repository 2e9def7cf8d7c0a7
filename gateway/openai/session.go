package openai

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
)

// HeaderSession names the session a request continues, by its full key.
const HeaderSession = "Lanefleet-Session"

// Session key forms.
const (
	// userInfix follows the caller's prefix in the key of a user's
	// session: "acme:openai-user:alice".
	userInfix = "openai-user:"
	// freshInfix follows it in the key of a fresh session:
	// "acme:openai:<random>".
	freshInfix = "openai:"
	// rootPrefix stands for the caller's prefix when it reaches every
	// session (prefix ""): OpenClaw's form, "agent:main:openai-user:alice".
	rootPrefix = "agent:main:"
	// maxUser bounds a user field.
	maxUser = 128
)

// errNoPrefix is a caller with no session-key prefix (only single keys):
// it must name one of its sessions with the header.
var errNoPrefix = errors.New("this token reaches only named sessions: name one with the " + HeaderSession + " header")

// sessionKey is the session a request runs in, and whether it is fresh
// (no transcript yet). header is the Lanefleet-Session header's value,
// user the body's user field.
//
//   - header set: that session key, as it is; the caller must reach it
//     (else errNotFound, as for a session that does not exist).
//   - user set: the caller's first prefix, then "openai-user:", then user
//     ("agent:main:" stands for the prefix "" that reaches everything).
//   - neither: a fresh session, "openai:" and 16 random hex digits after
//     that prefix.
func sessionKey(p *auth.Principal, header, user string) (key string, fresh bool, err error) {
	if header != "" {
		if events.ValidateKey(header) != nil || !p.AllowsSession(header) {
			return "", false, errNotFound
		}
		return header, false, nil
	}
	if len(user) > maxUser || !utf8.ValidString(user) {
		return "", false, badParam("user", "user must be valid UTF-8 of at most %d bytes", maxUser)
	}
	if len(p.Prefixes) == 0 {
		return "", false, errNoPrefix
	}
	prefix := p.Prefixes[0]
	if prefix == "" {
		prefix = rootPrefix
	}
	if user != "" {
		key = prefix + userInfix + user
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		key, fresh = prefix+freshInfix+fmt.Sprintf("%x", b), true
	}
	if events.ValidateKey(key) != nil || !p.AllowsSession(key) {
		return "", false, badParam("user", "user does not make a valid session key under this token's prefix")
	}
	return key, fresh, nil
}

// errNotFound is a session or response the caller may not reach, or that
// does not exist: the same answer for both.
var errNotFound = errors.New("not found")

// respID is what a response id carries: enough for any gateway process
// to find the run again and describe it as it was created.
type respID struct {
	Session    string
	Run        string // the run id: the message's inbound stream sequence
	Model      string // the model as the request named it
	Created    int64  // Unix seconds
	Background bool
}

// Response id encoding: "resp_" then base64url (no padding) of a version
// byte, a flags byte, then uvarint created, and three length-prefixed
// (uvarint) strings: session, run, model. Nothing in it is secret: every
// use checks the caller reaches the session again.
const (
	respPrefix   = "resp_"
	idVersion    = 1
	flagBkg      = 1
	maxIDLen     = 1024
	maxModelName = 256
)

var idEnc = base64.RawURLEncoding

// encode returns the response id.
func (r respID) encode() string {
	b := []byte{idVersion, 0}
	if r.Background {
		b[1] |= flagBkg
	}
	b = binary.AppendUvarint(b, uint64(max(r.Created, 0)))
	for _, s := range []string{r.Session, r.Run, r.Model} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return respPrefix + idEnc.EncodeToString(b)
}

// decodeRespID reads a response id; any malformed id is errNotFound.
func decodeRespID(s string) (respID, error) {
	body, ok := strings.CutPrefix(s, respPrefix)
	if !ok || len(s) > maxIDLen {
		return respID{}, errNotFound
	}
	b, err := idEnc.DecodeString(body)
	if err != nil || len(b) < 2 || b[0] != idVersion || b[1]&^flagBkg != 0 {
		return respID{}, errNotFound
	}
	r := respID{Background: b[1]&flagBkg != 0}
	b = b[2:]
	created, n := binary.Uvarint(b)
	if n <= 0 || created > 1<<40 {
		return respID{}, errNotFound
	}
	r.Created, b = int64(created), b[n:]
	var fields [3]string
	for i := range fields {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return respID{}, errNotFound
		}
		fields[i], b = string(b[n:n+int(l)]), b[n+int(l):]
	}
	if len(b) != 0 {
		return respID{}, errNotFound
	}
	r.Session, r.Run, r.Model = fields[0], fields[1], fields[2]
	if events.ValidateKey(r.Session) != nil || len(r.Model) > maxModelName {
		return respID{}, errNotFound
	}
	if seq, err := strconv.ParseUint(r.Run, 10, 64); err != nil || seq == 0 {
		return respID{}, errNotFound
	}
	return r, nil
}
