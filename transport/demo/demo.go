// Package demo serves the demo app of `synclane serve`: a todo-list page
// and its small ES-module sync client (static/ssp2.js, static/client.js),
// embedded in the binary. It is an example of a client, not a product: see
// README.md next to this file.
//
// The page speaks SSP2 wire version 3 to the sync routes under a mount, with
// development authentication (the x-actor header, the socket's actor
// parameter), on the built-in demo schema (schema.Demo, table todos). A
// server with token authentication must not serve it.
package demo

import (
	"bytes"
	"embed"
	"html"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static/index.html static/app.js static/client.js static/ssp2.js static/demo.css
var files embed.FS

// AssetPrefix is the path the page's scripts and style sheet are served
// under (GET /demo/<file>).
const AssetPrefix = "/demo/"

// Handler returns the demo app: GET / answers the page, GET /demo/<file>
// its assets; anything else under those patterns is 404. mount is the path
// prefix of the sync routes ("" or "/" for the root); the page reaches
// <mount>/sync and <mount>/realtime on the origin it was loaded from.
// Register it with Routes.
func Handler(mount string) http.Handler {
	mount = strings.TrimRight(mount, "/")
	index, err := files.ReadFile("static/index.html")
	if err != nil {
		panic("demo: embedded index.html missing: " + err.Error()) // a build defect, not a runtime condition
	}
	page := bytes.ReplaceAll(index, []byte("{{MOUNT}}"), []byte(html.EscapeString(mount)))
	static, _ := fs.Sub(files, "static")
	assets := http.StripPrefix(AssetPrefix, http.FileServerFS(static))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(page)
			return
		}
		if strings.HasPrefix(r.URL.Path, AssetPrefix) && r.URL.Path != AssetPrefix && r.URL.Path != AssetPrefix+"index.html" {
			assets.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	})
}

// Routes are the ServeMux patterns Handler answers: the root path exactly,
// and the assets.
var Routes = []string{"GET /{$}", "GET " + AssetPrefix}
