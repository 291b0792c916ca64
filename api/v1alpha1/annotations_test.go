package v1alpha1_test

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func TestParseHolderRelease(t *testing.T) {
	for _, tc := range []struct {
		in      string
		uid     types.UID
		token   int64
		wantErr string
	}{
		{in: "1f0c-42/4711", uid: "1f0c-42", token: 4711},
		{in: "u/1", uid: "u", token: 1},
		{in: "u/9223372036854775807", uid: "u", token: 9223372036854775807},
		{in: "", wantErr: "want <holderUID>/<token>"},
		{in: "1f0c-42", wantErr: "want <holderUID>/<token>"},
		{in: "/4711", wantErr: "holder UID is empty"},
		{in: " u/4711", wantErr: "holder UID is empty or malformed"},
		{in: "a/b/4711", wantErr: "is not a decimal number"},
		{in: "u/", wantErr: "token is empty"},
		{in: "u/0", wantErr: "not positive"},
		{in: "u/-3", wantErr: "not a decimal number"},
		{in: "u/+3", wantErr: "not a decimal number"},
		{in: "u/ 3", wantErr: "not a decimal number"},
		{in: "u/3.0", wantErr: "not a decimal number"},
		{in: "u/9223372036854775808", wantErr: "out of range"},
	} {
		uid, token, err := lockv1.ParseHolderRelease(tc.in)
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, lockv1.ErrInvalidRelease) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseHolderRelease(%q) = %q, %d, %v; want an ErrInvalidRelease containing %q", tc.in, uid, token, err, tc.wantErr)
			}
			continue
		}
		if err != nil || uid != tc.uid || token != tc.token {
			t.Errorf("ParseHolderRelease(%q) = %q, %d, %v; want %q, %d, nil", tc.in, uid, token, err, tc.uid, tc.token)
		}
		if got := lockv1.HolderReleaseValue(uid, token); got != tc.in {
			t.Errorf("HolderReleaseValue(%q, %d) = %q, want %q", uid, token, got, tc.in)
		}
	}
}

func TestParseReleaseRequest(t *testing.T) {
	for _, tc := range []struct {
		in      string
		token   int64
		wantErr string
	}{
		{in: "4711", token: 4711},
		{in: "007", token: 7},
		{in: "", wantErr: "token is empty"},
		{in: "0", wantErr: "not positive"},
		{in: "u/4711", wantErr: "not a decimal number"},
		{in: "4711 ", wantErr: "not a decimal number"},
		{in: "99999999999999999999", wantErr: "out of range"},
	} {
		token, err := lockv1.ParseReleaseRequest(tc.in)
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, lockv1.ErrInvalidRelease) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseReleaseRequest(%q) = %d, %v; want an ErrInvalidRelease containing %q", tc.in, token, err, tc.wantErr)
			}
			continue
		}
		if err != nil || token != tc.token {
			t.Errorf("ParseReleaseRequest(%q) = %d, %v; want %d, nil", tc.in, token, err, tc.token)
		}
	}
}

func TestReleaseReason(t *testing.T) {
	long := strings.Repeat("é", lockv1.MaxReleaseReasonLength) // 2 bytes each
	for _, tc := range []struct {
		name, in, want string
	}{
		{"trimmed", "  node drain \n", "node drain"},
		{"empty", "", ""},
		{"short kept", "rotate the primary", "rotate the primary"},
		{"cut at a character boundary", long, strings.Repeat("é", lockv1.MaxReleaseReasonLength/2)},
	} {
		if got := lockv1.ReleaseReason(tc.in); got != tc.want {
			t.Errorf("%s: ReleaseReason = %q (%d bytes), want %q (%d bytes)", tc.name, got, len(got), tc.want, len(tc.want))
		}
	}
}
