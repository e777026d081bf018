package main

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// readCSV reads the rows of dir/name after its header; none if the file does not exist.
func readCSV(dir, name string) ([][]string, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if len(recs) > 0 {
		recs = recs[1:]
	}
	return recs, err
}

// replot reads the CSVs in dir back (each optional) for plotAll and summary, so that
// plots and tables can be made again, or from runs of different sizes whose rows were
// put into one file.
func replot(dir string) ([]memRow, []shardRow, []stateRow, error) {
	read := func(name string) ([][]string, error) { return readCSV(dir, name) }
	num := func(s string) float64 {
		if s == "" {
			return math.NaN()
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	secs := func(s string) time.Duration {
		if s == "not run" {
			return notRun
		}
		v := num(s)
		if math.IsNaN(v) {
			return -1
		}
		return time.Duration(v * float64(time.Second))
	}
	var mem []memRow
	recs, err := read("membership.csv")
	if err != nil {
		return nil, nil, nil, err
	}
	for _, r := range recs {
		if len(r) < 12 {
			continue
		}
		n, _ := strconv.Atoi(r[0])
		row := memRow{N: n, Converge: secs(r[1]), Unreachable: secs(r[2]), Downed: secs(r[3]), Removed: secs(r[4]),
			LeaveRemoved: secs(r[5]), PartitionSplit: secs(r[6]), RestBytes: num(r[7]), RestMsgs: num(r[8]),
			RestCPU: num(r[9]), HeapPerMember: num(r[10]), Wall: secs(r[11]), JoinBytes: math.NaN(), CrashBytes: math.NaN()}
		if len(r) >= 14 {
			row.JoinBytes, row.CrashBytes = num(r[12]), num(r[13])
		}
		mem = append(mem, row)
	}
	var sh []shardRow
	if recs, err = read("coordinator.csv"); err != nil {
		return nil, nil, nil, err
	}
	for _, r := range recs {
		if len(r) < 7 {
			continue
		}
		s, _ := strconv.Atoi(r[1])
		m, _ := strconv.Atoi(r[2])
		moves, _ := strconv.Atoi(r[5])
		sh = append(sh, shardRow{Strategy: r[0], Shards: s, Members: m, Allocate: secs(r[3]), Rebalance: secs(r[4]),
			Moves: moves, Replace: secs(r[6])})
	}
	var st []stateRow
	if recs, err = read("coordinator_state.csv"); err != nil {
		return nil, nil, nil, err
	}
	for _, r := range recs {
		if len(r) < 7 {
			continue
		}
		s, _ := strconv.Atoi(r[0])
		m, _ := strconv.Atoi(r[1])
		b, _ := strconv.Atoi(r[2])
		row := stateRow{Shards: s, Members: m, Bytes: b, Put: secs(r[3]), Write: secs(r[4]), ReadBack: secs(r[5]), Err: r[6]}
		if len(r) > 7 {
			row.MaxKey, _ = strconv.Atoi(r[7])
		}
		if len(r) > 8 {
			row.ReadCPU = secs(r[8])
		}
		row.Layout = stateLWWMap // rows from before the column
		if len(r) > 9 {
			row.Layout = r[9]
		}
		if len(r) > 10 {
			row.IdleCPU, _ = strconv.ParseFloat(r[10], 64)
		}
		st = append(st, row)
	}
	return mem, sh, st, nil
}
