//go:build !banktrap

package main

// trapDeposits makes every deposit trap: false but in the broken build (-tags banktrap).
const trapDeposits = false
