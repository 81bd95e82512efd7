package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/synclane/synclane/transport/auth"
)

// scopesFlag collects --scopes: each value is a JSON object of variable →
// values ({"list_id":["a","b"]}) or a comma-separated list of
// variable=value pairs (list_id=a,list_id=b); repeated flags add up.
type scopesFlag map[string][]string

func (s *scopesFlag) String() string {
	if s == nil || *s == nil {
		return ""
	}
	b, _ := json.Marshal(*s)
	return string(b)
}

func (s *scopesFlag) Set(v string) error {
	if *s == nil {
		*s = map[string][]string{}
	}
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "{") {
		var m map[string][]string
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return fmt.Errorf(`scopes as JSON must be an object of variable to an array of values, e.g. {"list_id":["a"]}: %w`, err)
		}
		for k, vals := range m {
			(*s)[k] = append((*s)[k], vals...)
		}
		return nil
	}
	for _, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" {
			return fmt.Errorf("scopes: %q is not variable=value (e.g. list_id=a,list_id=b)", pair)
		}
		(*s)[k] = append((*s)[k], val)
	}
	return nil
}

// tokenCmd mints a development JWT that `synclane serve --jwt-secret` with
// the same secret accepts: HS256 over the claims serve reads (sub,
// partition, scopes, exp; iat for the record). It prints the token alone on
// stdout (for TOKEN=$(synclane token ...)) and what it holds on stderr.
func tokenCmd(_ context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	var (
		secret, actor, partition, expires string
		ttl                               time.Duration
		scopes                            scopesFlag
	)
	fs := flag.NewFlagSet("synclane token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&secret, "jwt-secret", "", fmt.Sprintf("the HS256 secret serve is given with --jwt-secret (at least %d bytes)", minJWTSecret))
	fs.StringVar(&actor, "actor", "", "the actor the token authenticates (the sub claim); required")
	fs.StringVar(&partition, "partition", auth.DefaultPartition, "the partition the token addresses (the partition claim)")
	fs.Var(&scopes, "scopes", `the scopes granted (the scopes claim): a JSON object {"list_id":["a","b"]} or variable=value pairs list_id=a,list_id=b; repeat to add`)
	fs.DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid from now (the exp claim)")
	fs.StringVar(&expires, "expires", "", "when the token expires, RFC 3339 (e.g. 2030-01-02T15:04:05Z); instead of --ttl")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: synclane token --jwt-secret SECRET --actor ID [--partition P] [--scopes {...}|k=v,...] [--ttl D | --expires T]\n\n"+
			"Mints a development JWT that `synclane serve --jwt-secret SECRET` accepts and prints it on stdout.\n"+
			"Every flag can also be set through the environment variable shown under it (SYNCLANE_JWT_SECRET as for serve); flags win.\n\n")
		printFlags(stderr, fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := applyEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "synclane token:", err)
		return 2
	}
	given := givenFlags(fs)
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "synclane token: "+format+"\n", a...)
		return 2
	}
	exp := time.Now().Add(ttl)
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case !given["jwt-secret"]:
		return usageErr("--jwt-secret (or SYNCLANE_JWT_SECRET) is required: the secret serve is given")
	case len(secret) < minJWTSecret:
		return usageErr("--jwt-secret is %d bytes: serve refuses a secret under %d bytes, so no token for it would ever be checked", len(secret), minJWTSecret)
	case strings.TrimSpace(actor) == "":
		return usageErr("--actor is required (the sub claim)")
	case given["ttl"] && given["expires"]:
		return usageErr("give one of --ttl and --expires")
	case given["expires"]:
		t, err := time.Parse(time.RFC3339, expires)
		if err != nil {
			return usageErr("--expires: %v (want RFC 3339, e.g. 2030-01-02T15:04:05Z)", err)
		}
		exp = t
	case ttl <= 0:
		return usageErr("--ttl must be positive (serve refuses tokens without exp unless --jwt-allow-no-exp)")
	}
	if !exp.After(time.Now()) {
		return usageErr("--expires %s is in the past", exp.UTC().Format(time.RFC3339))
	}
	claims := map[string]any{"sub": strings.TrimSpace(actor), "iat": time.Now().Unix(), "exp": exp.Unix()}
	if partition = strings.TrimSpace(partition); partition != "" {
		claims["partition"] = partition
	}
	if len(scopes) > 0 {
		claims["scopes"] = map[string][]string(scopes)
	}
	fmt.Fprintln(stdout, auth.SignJWT([]byte(secret), claims))
	fmt.Fprintf(stderr, "synclane token: actor %q, partition %q, scopes %s, expires %s; send it as Authorization: Bearer <token> (WebSocket upgrades: ?access_token=)\n",
		claims["sub"], partition, scopes.String(), exp.UTC().Format(time.RFC3339))
	return 0
}
