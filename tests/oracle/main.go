// Command oracle evaluates DRA device-selector CEL expressions with Kubernetes'
// own implementation (k8s.io/dynamic-resource-allocation/cel), so that plnt's
// Python evaluator can be checked case by case against it.
//
// Input (stdin): a JSON array of cases
//
//	[{"id": "q1", "expression": "...", "device": {InferenceClass device}}]
//
// where a device is {"driver": "...", "attributes": {"name": {"string"|"int"|
// "bool"|"version": v}}, "capacity": {"name": {"value": "80Gi"}}}.
//
// Output (stdout): one JSON object per case and line:
//
//	{"id": "q1", "result": "match"|"nomatch"|"error", "message": "..."}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

type attribute struct {
	String  *string `json:"string,omitempty"`
	Int     *int64  `json:"int,omitempty"`
	Bool    *bool   `json:"bool,omitempty"`
	Version *string `json:"version,omitempty"`
}

type capacity struct {
	Value string `json:"value"`
}

type device struct {
	Driver     string               `json:"driver"`
	Attributes map[string]attribute `json:"attributes"`
	Capacity   map[string]capacity  `json:"capacity"`
}

type testCase struct {
	ID         string `json:"id"`
	Expression string `json:"expression"`
	Device     device `json:"device"`
}

type outcome struct {
	ID      string `json:"id"`
	Result  string `json:"result"`
	Message string `json:"message,omitempty"`
}

func toDRA(d device) (dracel.Device, error) {
	out := dracel.Device{
		Driver:     d.Driver,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{},
		Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{},
	}
	for name, a := range d.Attributes {
		out.Attributes[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{
			StringValue: a.String, IntValue: a.Int, BoolValue: a.Bool, VersionValue: a.Version,
		}
	}
	for name, c := range d.Capacity {
		q, err := resource.ParseQuantity(c.Value)
		if err != nil {
			return out, fmt.Errorf("capacity %s: %w", name, err)
		}
		out.Capacity[resourceapi.QualifiedName(name)] = resourceapi.DeviceCapacity{Value: q}
	}
	return out, nil
}

func evaluate(c testCase) outcome {
	fail := func(msg string) outcome { return outcome{ID: c.ID, Result: "error", Message: msg} }
	// API validation bounds the length before anything compiles.
	if len(c.Expression) > resourceapi.CELSelectorExpressionMaxLength {
		return fail(fmt.Sprintf("expression too long: %d > %d", len(c.Expression), resourceapi.CELSelectorExpressionMaxLength))
	}
	compiled := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(c.Expression, dracel.Options{})
	if compiled.Error != nil {
		return fail(compiled.Error.Error())
	}
	dev, err := toDRA(c.Device)
	if err != nil {
		return fail(err.Error())
	}
	ok, _, err := compiled.DeviceMatches(context.Background(), dev)
	switch {
	case err != nil:
		return fail(err.Error())
	case ok:
		return outcome{ID: c.ID, Result: "match"}
	default:
		return outcome{ID: c.ID, Result: "nomatch"}
	}
}

func main() {
	var cases []testCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "oracle: reading cases:", err)
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, c := range cases {
		if err := enc.Encode(evaluate(c)); err != nil {
			fmt.Fprintln(os.Stderr, "oracle: writing:", err)
			os.Exit(2)
		}
	}
}
