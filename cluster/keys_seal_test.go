package cluster

import "testing"

func TestSealRoundTrip(t *testing.T) {
	key, secret := []byte("0123456789abcdef0123456789abcdef"), []byte("new key 16 bytes")
	sealed, nonce, err := seal(key, secret)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := open(key, nonce, sealed); err != nil || string(b) != string(secret) {
		t.Fatalf("open: %q %v", b, err)
	}
	sealed[0] ^= 1
	if _, err := open(key, nonce, sealed); err == nil {
		t.Fatal("a tampered sealed key opened")
	}
	if _, err := open([]byte("fedcba9876543210"), nonce, sealed); err == nil {
		t.Fatal("opened with another key")
	}
}
