//go:build banktrap

package main

// trapDeposits makes every deposit trap: this build (-tags banktrap) is the broken
// version 2 whose canary e2e/bank_upgrade_test.go rolls back.
const trapDeposits = true
