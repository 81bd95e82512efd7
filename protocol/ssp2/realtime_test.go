package ssp2

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2/ssp2test"
)

// Direction of each realtime vector (the manifest does not say).
var realtimeClientToServer = map[string]bool{"presence-publish": true}

func TestRealtimeVectors(t *testing.T) {
	dir := ssp2test.VectorsDir(t)
	man := ssp2test.LoadManifest(t, dir, "realtime")
	for _, c := range man.Cases {
		t.Run(c.Name, func(t *testing.T) {
			b := ssp2test.ReadFile(t, dir, "realtime", c.JSON)
			v, err := ParseControl(b)
			if err != nil {
				t.Fatalf("ParseControl: %v", err)
			}
			parse := ParseServerControl
			if realtimeClientToServer[c.Name] {
				parse = ParseClientControl
			}
			v2, err := parse(b)
			if err != nil {
				t.Fatalf("directional parse: %v", err)
			}
			if !reflect.DeepEqual(v, v2) {
				t.Fatalf("ParseControl and directional parse disagree: %#v vs %#v", v, v2)
			}
			if _, ok := v.(*UnknownControl); ok {
				t.Fatalf("vector parsed as unknown control")
			}
			out, err := MarshalControl(v)
			if err != nil {
				t.Fatalf("MarshalControl: %v", err)
			}
			if !ssp2test.JSONEqual(t, out, b) {
				t.Fatalf("re-marshal differs\n got: %s\nwant: %s", out, b)
			}
		})
	}
	for _, c := range man.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			b := ssp2test.ReadFile(t, dir, "realtime", c.JSON)
			_, err := ParseControl(b)
			wantCode(t, err, c.Error)
		})
	}
}

func TestRealtimeRules(t *testing.T) {
	ok := []string{
		`{"event":"heartbeat","data":{"timestamp":1}}`,
		`{"event":"brand-new","data":42}`,
		`{"type":"ack","cursor":7}`,
		`{"type":"future"}`,
		`{"event":"presence","data":{"scopeKey":"p:1","doc":null}}`,
		`{"event":"presence","data":{"scopeKey":"p:1","kind":"leave","actorId":"a","clientId":"c","doc":null,"timestamp":5}}`,
		`{"event":"presence","data":{"scopeKey":"p:1","error":"presence.too_large","timestamp":5}}`,
		`{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"reset-required","timestamp":2}}`,
	}
	for _, s := range ok {
		if _, err := ParseControl([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := []string{
		`{"event":"heartbeat","data":{"timestamp":1.5}}`,
		`{"event":"heartbeat"}`,
		`{"type":"ack","cursor":9007199254740992}`,
		`{"type":"ack","cursor":"7"}`,
		`{"event":"sync","data":{"cursor":1,"requiresPull":true,"reason":"other","timestamp":2}}`,
		`{"event":"sync","data":{"cursor":1,"requiresPull":1,"reason":"reset-required","timestamp":2}}`,
		`{"event":"presence","data":{"scopeKey":"p:1","kind":"wave","actorId":"a","clientId":"c","doc":{},"timestamp":5}}`,
		`{"event":"presence","data":{"scopeKey":"p:1","kind":"join","actorId":"a","clientId":"c","doc":null,"timestamp":5}}`,
		`{"event":"presence","data":{"scopeKey":"p:1","kind":"leave","actorId":"a","clientId":"c","doc":{},"timestamp":5}}`,
		`{"event":"presence","data":{"scopeKey":"","doc":null}}`,
		`{"event":"presence","data":{"scopeKey":"p:1","doc":[1]}}`,
		`[]`,
	}
	for _, s := range bad {
		_, err := ParseControl([]byte(s))
		if err == nil {
			t.Errorf("%s: accepted", s)
			continue
		}
		wantCode(t, err, "sync.invalid_request")
	}
	// MarshalControl round trip for a wake.
	b, err := MarshalControl(&Wake{Cursor: 3, Reason: WakeDeltaTooLarge, Timestamp: 9})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m["event"] != "sync" {
		t.Fatalf("wake marshal: %s", b)
	}
	if _, err := MarshalControl(&Wake{Reason: "nope"}); err == nil {
		t.Fatal("MarshalControl accepted a bad reason")
	}
}
