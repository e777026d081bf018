// Package kubernetes_test checks the manifests of deploy/kubernetes: no Kubernetes runs
// here, so each is decoded strictly into its k8s.io/api type (a field the API does not
// know is an error) and the references between them are checked, with the members'
// settings read by the shardhost binary itself.
package kubernetes_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

type manifests struct {
	sts      appsv1.StatefulSet
	headless corev1.Service
	api      corev1.Service
	pdb      policyv1.PodDisruptionBudget
	config   corev1.ConfigMap
	secret   corev1.Secret
}

// decode reads file strictly into v: unknown or duplicate fields are errors.
func decode(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func load(t *testing.T) manifests {
	t.Helper()
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Labels     []struct {
			Pairs            map[string]string `json:"pairs"`
			IncludeSelectors bool              `json:"includeSelectors"`
		} `json:"labels"`
		Images []struct {
			Name, NewName, NewTag string
		} `json:"images"`
	}
	decode(t, "kustomization.yaml", &k)
	files, _ := filepath.Glob("*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	slices.Sort(files)
	res := slices.Clone(k.Resources)
	slices.Sort(res)
	if !slices.Equal(files, res) {
		t.Fatalf("kustomization.yaml lists %v, the directory holds %v", k.Resources, files)
	}
	var m manifests
	for file, v := range map[string]any{"statefulset.yaml": &m.sts, "service-headless.yaml": &m.headless,
		"service-api.yaml": &m.api, "pdb.yaml": &m.pdb, "configmap.yaml": &m.config, "secret.yaml": &m.secret} {
		decode(t, file, v)
	}
	for kind, got := range map[string]string{"StatefulSet": m.sts.Kind, "Service": m.headless.Kind, "PodDisruptionBudget": m.pdb.Kind,
		"ConfigMap": m.config.Kind, "Secret": m.secret.Kind} {
		if got != kind {
			t.Errorf("kind %q, want %q", got, kind)
		}
	}
	return m
}

// selects reports whether every label of selector is on labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// TestManifestsDecodeStrictlyAndAgree: every manifest is a valid object of its kind,
// and they agree: selectors, ports, probes, volumes, the Secret's keys, and a grace
// period longer than the members' --shutdown-timeout.
func TestManifestsDecodeStrictlyAndAgree(t *testing.T) {
	m := load(t)
	pod := m.sts.Spec.Template
	if !selects(m.sts.Spec.Selector.MatchLabels, pod.Labels) || !selects(m.headless.Spec.Selector, pod.Labels) ||
		!selects(m.api.Spec.Selector, pod.Labels) || !selects(m.pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("a selector does not select the StatefulSet's pods %v", pod.Labels)
	}
	if m.sts.Spec.ServiceName != m.headless.Name || m.headless.Spec.ClusterIP != "None" || !m.headless.Spec.PublishNotReadyAddresses {
		t.Errorf("the headless Service: %s (serviceName %s), clusterIP %q, publishNotReadyAddresses %v",
			m.headless.Name, m.sts.Spec.ServiceName, m.headless.Spec.ClusterIP, m.headless.Spec.PublishNotReadyAddresses)
	}
	if m.pdb.Spec.MaxUnavailable == nil || m.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", m.pdb.Spec.MaxUnavailable)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["api"] != 8080 || ports["gossip"] != 7946 || ports["transport"] != 7947 {
		t.Errorf("container ports %v", ports)
	}
	for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/ready?state=admitted", c.LivenessProbe: "/alive", c.StartupProbe: "/alive"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "api" {
			t.Errorf("probe %+v, want GET %s on the api port", probe, want)
		}
	}
	// Clients reach ready members only: a member back at a new pod IP gets traffic once
	// the state store's ring admits it (the readiness probe's state=admitted).
	if m.api.Spec.PublishNotReadyAddresses {
		t.Errorf("the API Service publishes not-ready addresses")
	}
	if m.api.Spec.Ports[0].TargetPort.String() != "api" {
		t.Errorf("the API Service targets %v", m.api.Spec.Ports[0].TargetPort)
	}
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.FSGroup == nil || *sc.FSGroup != 65532 {
		t.Errorf("pod securityContext %+v: want non-root 65532 (the image's user) and fsGroup 65532", sc)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}

	// Volumes: the config file, the Secret, the data volume claim.
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols["config"]; v.ConfigMap == nil || v.ConfigMap.Name != m.config.Name {
		t.Errorf("the config volume %+v does not name ConfigMap %s", v, m.config.Name)
	}
	if v := vols["secret"]; v.Secret == nil || v.Secret.SecretName != m.secret.Name {
		t.Errorf("the secret volume %+v does not name Secret %s", v, m.secret.Name)
	}
	if len(m.sts.Spec.VolumeClaimTemplates) != 1 || m.sts.Spec.VolumeClaimTemplates[0].Name != "data" || mounts["data"].MountPath != "/data" {
		t.Errorf("the data volume: claims %v, mount %+v", m.sts.Spec.VolumeClaimTemplates, mounts["data"])
	}
	for _, key := range []string{"tokens", "leave-token"} {
		if _, ok := m.secret.StringData[key]; !ok {
			t.Errorf("Secret %s has no %s", m.secret.Name, key)
		}
	}
	cfgFile, ok := m.config.Data[mounts["config"].SubPath]
	if !ok || mounts["config"].SubPath == "" {
		t.Fatalf("the config mount %+v names no key of ConfigMap %s", mounts["config"], m.config.Name)
	}
	if !slices.Contains(c.Args, mounts["config"].MountPath) {
		t.Errorf("args %v do not give --config %s", c.Args, mounts["config"].MountPath)
	}
	pre := c.Lifecycle.PreStop
	if pre == nil || pre.Exec == nil || len(pre.Exec.Command) < 2 || pre.Exec.Command[0] != "/shardhost" || pre.Exec.Command[1] != "leave" ||
		!slices.Contains(pre.Exec.Command, mounts["secret"].MountPath+"/leave-token") {
		t.Errorf("preStop %+v: want /shardhost leave with the Secret's leave-token", pre)
	}

	// The member's stable name is the pod's: its name (stable in a StatefulSet) under
	// the headless Service, from the downward API.
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_IP"] != "status.podIP" || env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("env %v: want POD_IP, POD_NAME and POD_NAMESPACE from the downward API", env)
	}

	// The settings, as the shardhost binary reads them (--print-config, with the
	// pod's --bind and --member-name): every key a start flag, and the values the
	// manifests rely on.
	settings := printConfig(t, cfgFile, c.Args)
	if want := m.sts.Name + "-0." + m.headless.Name + ".default"; settings["member-name"] != want {
		t.Errorf("member-name %q, want the pod's stable DNS name %q", settings["member-name"], want)
	}
	if settings["api"] != "0.0.0.0:8080" || settings["data-dir"] != mounts["data"].MountPath ||
		settings["discovery"] != "dns:"+m.headless.Name ||
		settings["api-tokens-file"] != mounts["secret"].MountPath+"/tokens" {
		t.Errorf("settings %v: want the API on 8080, data under the data volume, discovery through the headless Service, the Secret's tokens", settings)
	}
	shutdown, err := time.ParseDuration(settings["shutdown-timeout"])
	if err != nil {
		t.Fatal(err)
	}
	if grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= shutdown+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v, not longer than --shutdown-timeout %v with room to spare", grace, shutdown)
	}
}

// printConfig runs shardhost start --print-config with the ConfigMap's file and the
// container's arguments (POD_IP, POD_NAME and POD_NAMESPACE set, as for pod 0 of
// the StatefulSet in namespace default) and returns the settings.
func printConfig(t *testing.T, cfgFile string, args []string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	bin := filepath.Join(dir, "shardhost")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shardhost")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building shardhost: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "shardhost.yaml")
	os.WriteFile(file, []byte(cfgFile), 0o644)
	var run []string
	for _, a := range args {
		a = strings.NewReplacer("$(POD_IP)", "10.1.2.3", "$(POD_NAME)", "shardhost-0", "$(POD_NAMESPACE)", "default").Replace(a)
		if a == "/etc/shardhost/shardhost.yaml" {
			a = file
		}
		run = append(run, a)
	}
	cmd := exec.Command(bin, append(run, "--print-config")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("shardhost %v --print-config: %v\n%s", run, err, out)
	}
	settings := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, rest, _ := strings.Cut(line, ": ")
		value, _, _ := strings.Cut(rest, "  # ")
		settings[name] = strings.Trim(value, `"`)
	}
	if settings["bind"] != "10.1.2.3:7946" {
		t.Errorf("bind %q, want the pod's IP", settings["bind"])
	}
	if len(settings) < 10 {
		t.Fatalf("--print-config printed %s", out)
	}
	return settings
}
