// Command kstatus prints what kstatus (Flux's health checks, `kubectl wait`-style tooling built on
// sigs.k8s.io/cli-utils) makes of Kubernetes objects: one line per YAML file,
// "<file>\t<status>\t<message>". tests/unit/test_argocd_health.py runs it on GdpvalRun samples.
package main

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

func main() {
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// Through JSON so numbers are int64, as the API server's objects are.
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			fmt.Fprintln(os.Stderr, path, err)
			os.Exit(1)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			fmt.Fprintln(os.Stderr, path, err)
			os.Exit(1)
		}
		res, err := status.Compute(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, path, err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%s\t%s\n", path, res.Status, res.Message)
	}
}
