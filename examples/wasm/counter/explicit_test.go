//go:build !transparent

package main

const transparent = false
