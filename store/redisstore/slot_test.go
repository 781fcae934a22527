package redisstore

import "testing"

func TestSlot(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31c3 % 16384}, // the CRC16/XMODEM check value
		{"foo", 12182},                // from the Redis Cluster specification
		{"{user1000}.following", slot("user1000")},
		{"{}x", slot("{}x")},
	} {
		if got := slot(tc.key); got != tc.want {
			t.Errorf("slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if slot("{user1000}.following") != slot("{user1000}.followers") {
		t.Error("keys with one hash tag are in different slots")
	}
}
