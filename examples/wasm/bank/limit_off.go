//go:build !banklimit

package main

// maxDeposit is the largest deposit an account takes; 0: any.
const maxDeposit = 0
