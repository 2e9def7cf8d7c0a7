// Package console is the gateway's web console: a page at / and its
// assets under /console/, embedded in the binary (no CDN, no build step).
// The page is a shell; a few plain ES modules call the gateway's JSON API
// with the caller's token (kept in the tab's sessionStorage, sent in the
// Authorization header, never in a URL) and read its event streams with
// fetch, so the console can do exactly what the token may do through the
// API and nothing else: there is no route of its own behind it.
//
// Every response of the console carries a strict Content-Security-Policy
// (scripts and styles from the gateway only, no inline code, no frames,
// no plugins, no form posts, Trusted Types required so no string reaches
// an HTML sink), X-Content-Type-Options: nosniff and Referrer-Policy:
// no-referrer. The scripts build pages with DOM calls and textContent
// only, so data (transcripts, tool arguments, session keys, errors) is
// never parsed as markup.
//
// Files: console.go (the routes and headers); assets/ (index.html,
// style.css, and the modules: app.js routes and the page frame, api.js
// the API and its event streams, dom.js the element builder, and one
// module per page).
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/lanefleet/lanefleet/gateway/route"
)

//go:embed assets
var assets embed.FS

// CSP is the Content-Security-Policy of every console response.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// handler serves the page and the assets.
type handler struct {
	files map[string]asset // by name below assets/
}

// Routes returns the console's routes: the page at / (exactly) and its
// assets at /console/<name>. Both are public: the assets hold no data,
// and every call the page makes carries the caller's token.
func Routes() []route.Route {
	h := &handler{files: map[string]asset{}}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if strings.HasSuffix(p, ".js") {
			ct = "text/javascript; charset=utf-8" // not the host's mime table's guess
		}
		h.files[strings.TrimPrefix(p, "assets/")] = asset{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("console: embedded assets: " + err.Error()) // the binary was built without them
	}
	return []route.Route{
		{Method: "GET", Pattern: "/{$}", Reach: route.Public, Handler: http.HandlerFunc(h.page)},
		{Method: "GET", Pattern: "/console/{file...}", Reach: route.Public, Handler: http.HandlerFunc(h.asset)},
	}
}

// secure sets the headers every console response carries.
func secure(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, "index.html")
}

func (h *handler) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "index.html" {
		name = "" // one address for the page
	}
	h.serve(w, r, name)
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request, name string) {
	secure(w)
	a, ok := h.files[name]
	if !ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("no such console file\n"))
		return
	}
	w.Header().Set("Cache-Control", "no-cache") // revalidated by ETag: a new binary's assets are seen at once
	w.Header().Set("ETag", a.etag)
	if match := r.Header.Get("If-None-Match"); match != "" && match == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	_, _ = w.Write(a.body)
}
