//go:build banktrap

package main

// trapDeposits makes every deposit trap: this build (-tags banktrap) is the broken
// version whose canary e2e/bank_upgrade_test.go rolls back.
const trapDeposits = true
