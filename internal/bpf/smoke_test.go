// SPDX-License-Identifier: Apache-2.0

package bpf

import "testing"

func TestLoadSmoke(t *testing.T) {
	dp, err := Open(Limits{Flows: 1024, Rules: 1024}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if _, err := dp.LoadProgram(); err != nil {
		t.Fatal(err)
	}
}
