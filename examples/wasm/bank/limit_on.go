//go:build banklimit

package main

// maxDeposit is the largest deposit an account takes: this build (-tags banklimit) is
// the changed bank whose trial upgrade e2e/replay_test.go runs.
const maxDeposit = 1000
