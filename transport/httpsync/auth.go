package httpsync

import "github.com/synclane/synclane/transport/auth"

// The authenticators moved to package transport/auth, shared by every
// transport; these names keep code written against httpsync.Options.Auth
// compiling.
type (
	// Authenticator authenticates a request.
	//
	// Deprecated: use auth.Authenticator.
	Authenticator = auth.Authenticator
	// AuthenticatorFunc adapts a function to Authenticator.
	//
	// Deprecated: use auth.AuthenticatorFunc.
	AuthenticatorFunc = auth.AuthenticatorFunc
	// DevAuth is the development authenticator.
	//
	// Deprecated: use auth.DevAuth.
	DevAuth = auth.DevAuth
	// JWTAuth authenticates HS256 JSON Web Tokens.
	//
	// Deprecated: use auth.JWTAuth.
	JWTAuth = auth.JWTAuth
)
