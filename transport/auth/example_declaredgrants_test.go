package auth_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// boardSchema: cards scoped by board.
const boardSchema = `{"version":1,"tables":[{"name":"cards","columns":[
 {"name":"id","type":"string"},{"name":"board_id","type":"string"},{"name":"text","type":"string"}],
 "primaryKey":"id","scopes":["board:{board_id}"]}]}`

// With JWT authentication the token carries the actor (sub), the
// partition and the scopes ({variable: [values]}); GrantsResolver answers
// the token's scopes as the scope resolver. DeclaredGrants refuses, at
// authentication, a token naming a variable the schema does not declare
// (401 sync.auth_required: the token is at fault, not the request).
func ExampleDeclaredGrants() {
	sch, err := schema.Parse([]byte(boardSchema))
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.New(context.Background(), engine.Config{
		Schema:   sch,
		Backend:  memory.New().Backend(),
		Resolver: auth.GrantsResolver, // the token's scopes claim
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	secret := []byte("a secret of 32 bytes or more, from your vault")
	authn := auth.DeclaredGrants(auth.JWTAuth{Secret: secret}, sch.DeclaresVar)
	srv := httptest.NewServer(httpsync.NewHandler(eng, httpsync.Options{Auth: authn}))
	defer srv.Close()

	exp := time.Now().Add(time.Hour).Unix()
	for _, scopes := range []map[string]any{
		{"board_id": []string{"b1"}},
		{"project_id": []string{"p1"}}, // the issuer mapped the wrong claim
	} {
		token := auth.SignJWT(secret, map[string]any{"sub": "ada", "partition": "acme", "scopes": scopes, "exp": exp})
		client := &httpsync.Client{URL: srv.URL, ClientID: "c1", Header: http.Header{"Authorization": {"Bearer " + token}}}
		if err := client.Handshake(context.Background()); err != nil {
			fmt.Printf("scopes %v: refused, %s\n", scopes, syncerr.CodeOf(err))
		} else {
			fmt.Printf("scopes %v: served\n", scopes)
		}
	}
	// Output:
	// scopes map[board_id:[b1]]: served
	// scopes map[project_id:[p1]]: refused, sync.auth_required
}
