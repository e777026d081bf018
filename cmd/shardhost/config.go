package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix prefixes the environment variable of every start flag: --api-tokens-file is
// SHARDHOST_API_TOKENS_FILE.
const envPrefix = "SHARDHOST_"

// notFromEnv are the flags whose SHARDHOST_ variable means something else already:
// SHARDHOST_GOSSIP_KEY is the gossip key itself, read where the key is read (the
// deprecated --gossip-key flag warns that ps shows it), and SHARDHOST_API is the API
// that the client commands (ask, deploy, ...) talk to, not the address start listens on.
var notFromEnv = map[string]bool{"gossip-key": true, "api": true}

// applyConfig sets every flag of cmd that the command line left out from the
// environment (SHARDHOST_<FLAG>) or else from the YAML file path (keys are flag names;
// lists for repeated flags), and returns where each flag's value came from: flag, env,
// file or default. The order is flag > env > file > default. A key of the file or a
// value that no flag takes is an error.
//
// Loading and merging are koanf's (a maintained configuration library, rather than
// our own parser); setting the flags goes through pflag, so that each value is checked
// as if it were given on the command line.
func applyConfig(cmd *cobra.Command, path string) (map[string]string, error) {
	flags := map[string]*pflag.Flag{}
	visit := func(f *pflag.Flag) { flags[f.Name] = f }
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)

	fromFile, fromEnv := koanf.New("."), koanf.New(".")
	if path != "" {
		if err := fromFile.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("--config %s: %v", path, err)
		}
		for _, k := range fromFile.Keys() {
			if _, ok := flags[k]; !ok || k == "config" || k == "print-config" {
				return nil, fmt.Errorf("--config %s: %q is not a setting of %s (the keys are its flags' names: %s --help)", path, k, cmd.Name(), cmd.CommandPath())
			}
		}
	}
	err := fromEnv.Load(env.Provider(envPrefix, ".", func(s string) string {
		return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s, envPrefix)), "_", "-")
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("reading %s* from the environment: %v", envPrefix, err)
	}

	source := map[string]string{}
	for name, f := range flags {
		switch {
		case f.Changed:
			source[name] = "flag"
		case !notFromEnv[name] && fromEnv.Exists(name) && name != "config" && name != "print-config":
			if err := setFlag(f, []string{fromEnv.String(name)}); err != nil {
				return nil, fmt.Errorf("%s%s: %v", envPrefix, strings.ToUpper(strings.ReplaceAll(name, "-", "_")), err)
			}
			source[name] = "env"
		case fromFile.Exists(name):
			values := []string{fromFile.String(name)}
			if _, list := fromFile.Get(name).([]any); list {
				values = fromFile.Strings(name)
			}
			if err := setFlag(f, values); err != nil {
				return nil, fmt.Errorf("--config %s: %s: %v", path, name, err)
			}
			source[name] = "file"
		default:
			source[name] = "default"
		}
	}
	return source, nil
}

// setFlag sets f to values: one value for a plain flag, each in turn for a list.
func setFlag(f *pflag.Flag, values []string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.Replace(values)
	}
	if len(values) != 1 {
		return fmt.Errorf("want one value, not %d", len(values))
	}
	return f.Value.Set(values[0])
}

// printConfig writes the effective settings of cmd as YAML that --config reads back,
// each with where it came from, secrets redacted: the deprecated --gossip-key, and a
// password in --state-store's URL.
func printConfig(w io.Writer, cmd *cobra.Command, source map[string]string) {
	var names []string
	for name := range source {
		if name != "config" && name != "print-config" && name != "help" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			f = cmd.InheritedFlags().Lookup(name)
		}
		var v string
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			quoted := make([]string, 0, len(sv.GetSlice()))
			for _, s := range sv.GetSlice() {
				quoted = append(quoted, fmt.Sprintf("%q", s))
			}
			v = "[" + strings.Join(quoted, ", ") + "]"
		} else {
			v = fmt.Sprintf("%q", redact(name, f.Value.String()))
		}
		fmt.Fprintf(w, "%s: %s  # %s\n", name, v, source[name])
	}
}

// redact hides a secret setting's value.
func redact(name, value string) string {
	switch {
	case value == "":
		return value
	case name == "gossip-key":
		return "REDACTED"
	case name == "state-store":
		if u, err := url.Parse(value); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), "REDACTED")
				return u.String()
			}
		}
		if strings.Contains(value, "password=") { // a key=value connection string
			parts := strings.Fields(value)
			for i, p := range parts {
				if strings.HasPrefix(p, "password=") {
					parts[i] = "password=REDACTED"
				}
			}
			return strings.Join(parts, " ")
		}
	}
	return value
}

// configFlags adds --config and --print-config to cmd.
func configFlags(cmd *cobra.Command, path *string, print *bool) {
	cmd.Flags().StringVar(path, "config", os.Getenv(envPrefix+"CONFIG"), "YAML `FILE` of settings, keyed by flag name (join: [a, b]); flags, then SHARDHOST_<FLAG> variables, override it (env SHARDHOST_CONFIG)")
	cmd.Flags().BoolVar(print, "print-config", false, "print the effective settings (where each comes from: flag, env, file, default; secrets redacted) and exit")
}
