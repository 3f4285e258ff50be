package core

import (
	"errors"
	"testing"
)

func TestRequestThen(t *testing.T) {
	errOp, errAfter := errors.New("op"), errors.New("after")
	for _, tc := range []struct {
		name           string
		opErr, fnErr   error
		want           error
		completeBefore bool
	}{
		{"ok", nil, nil, nil, false},
		{"after fails", nil, errAfter, errAfter, false},
		{"op fails first", errOp, errAfter, errOp, false},
		{"already complete", nil, errAfter, errAfter, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRequest()
			r.setSource(3)
			if tc.completeBefore {
				r.complete(tc.opErr)
			}
			var got error = errors.New("fn not run")
			next := r.Then(func(err error) error {
				got = err
				return tc.fnErr
			})
			if done, _ := next.Test(); done != tc.completeBefore {
				t.Fatalf("next finished = %v before r did", done)
			}
			if !tc.completeBefore {
				r.complete(tc.opErr)
			}
			done, err := next.Test()
			if !done || !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("next: done %v err %v, want %v", done, err, tc.want)
			}
			if got != tc.opErr {
				t.Fatalf("fn saw %v, want %v", got, tc.opErr)
			}
			if next.Source() != 3 {
				t.Fatalf("source %d", next.Source())
			}
		})
	}
	r := newRequest()
	next := r.Then(func(error) error { panic("boom") })
	r.complete(nil)
	if _, err := next.Test(); err == nil {
		t.Fatal("a panic in fn must fail the request")
	}
}
