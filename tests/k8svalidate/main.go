// Command k8svalidate checks rendered Kubernetes manifests the way the API server would on
// create: each YAML document on stdin (or in the files named as arguments) is decoded strictly
// into its typed k8s.io/api struct (unknown or duplicate fields are errors), defaulted,
// converted to the internal type and run through k8s.io/kubernetes' own validation.
//
// Kinds covered: apps/v1 Deployment, v1 Service, ConfigMap, Namespace, ServiceAccount,
// PersistentVolumeClaim, rbac.authorization.k8s.io/v1 Role and RoleBinding, batch/v1 Job, resource.k8s.io/v1 ResourceClaimTemplate and apiextensions.k8s.io/v1
// CustomResourceDefinition (structural schema, CEL compilation and estimated cost, as on
// create: an XRD's schema is checked this way); a LeaderWorkerSet's leader and
// worker pod templates are checked as core/v1 PodTemplateSpecs. Any other kind is reported as
// unsupported (an error), so a caller never mistakes "not checked" for "valid".
//
// Output: one JSON line per document {"kind","name","errors"}; exit status 1 if any document
// has errors, 2 on unreadable input.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"context"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/batch"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	batchvalidation "k8s.io/kubernetes/pkg/apis/batch/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	resourcevalidation "k8s.io/kubernetes/pkg/apis/resource/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

type result struct {
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	Errors []string `json:"errors"`
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// decodeStrict fills out from JSON, rejecting unknown and duplicate fields.
func decodeStrict(doc []byte, out any) error {
	strict, err := sigsjson.UnmarshalStrict(doc, out)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return errors.Join(strict...)
	}
	return nil
}

// internal defaults a versioned object and converts it to its internal type.
func internal(versioned runtime.Object, out any) error {
	legacyscheme.Scheme.Default(versioned)
	return legacyscheme.Scheme.Convert(versioned, out, nil)
}

func errs(list field.ErrorList) []string {
	out := []string{}
	for _, e := range list {
		out = append(out, e.Error())
	}
	return out
}

// object is a pointer to a versioned API type.
type object[T any] interface {
	*T
	runtime.Object
}

// check decodes doc strictly into V, defaults it, converts it to the internal type I and
// validates that.
func check[V any, PV object[V], I any](doc []byte, validate func(*I) field.ErrorList) []string {
	var v V
	var in I
	if err := decodeStrict(doc, &v); err != nil {
		return []string{err.Error()}
	}
	if err := internal(PV(&v), &in); err != nil {
		return []string{err.Error()}
	}
	return errs(validate(&in))
}

// validators by apiVersion/kind: what the API server runs on create.
var validators = map[string]func([]byte) []string{
	"apps/v1/Deployment": func(doc []byte) []string {
		return check[appsv1.Deployment](doc, func(in *apps.Deployment) field.ErrorList {
			return appsvalidation.ValidateDeployment(in, podutil.GetValidationOptionsFromPodTemplate(&in.Spec.Template, nil))
		})
	},
	"batch/v1/Job": func(doc []byte) []string {
		return check[batchv1.Job](doc, func(in *batch.Job) field.ErrorList {
			generateJobSelector(in)
			opts := batchvalidation.JobValidationOptions{
				PodValidationOptions: podutil.GetValidationOptionsFromPodTemplate(&in.Spec.Template, nil),
			}
			return batchvalidation.ValidateJobCreate(in, opts)
		})
	},
	"v1/Service": func(doc []byte) []string {
		return check[corev1.Service](doc, corevalidation.ValidateServiceCreate)
	},
	"v1/ConfigMap": func(doc []byte) []string {
		return check[corev1.ConfigMap](doc, corevalidation.ValidateConfigMap)
	},
	"v1/Namespace": func(doc []byte) []string {
		return check[corev1.Namespace](doc, corevalidation.ValidateNamespace)
	},
	"v1/ServiceAccount": func(doc []byte) []string {
		return check[corev1.ServiceAccount](doc, corevalidation.ValidateServiceAccount)
	},
	"v1/PersistentVolumeClaim": func(doc []byte) []string {
		return check[corev1.PersistentVolumeClaim](doc, func(in *core.PersistentVolumeClaim) field.ErrorList {
			return corevalidation.ValidatePersistentVolumeClaim(in, corevalidation.ValidationOptionsForPersistentVolumeClaim(in, nil))
		})
	},
	"rbac.authorization.k8s.io/v1/Role": func(doc []byte) []string {
		return check[rbacv1.Role](doc, rbacvalidation.ValidateRole)
	},
	"rbac.authorization.k8s.io/v1/RoleBinding": func(doc []byte) []string {
		return check[rbacv1.RoleBinding](doc, rbacvalidation.ValidateRoleBinding)
	},
	"resource.k8s.io/v1/ResourceClaimTemplate": func(doc []byte) []string {
		return check[resourcev1.ResourceClaimTemplate](doc, resourcevalidation.ValidateResourceClaimTemplate)
	},
	// What the API server checks when a CRD is created, CEL compilation and cost included.
	"apiextensions.k8s.io/v1/CustomResourceDefinition": func(doc []byte) []string {
		return check[apiextensionsv1.CustomResourceDefinition](doc, func(in *apiextensionsinternal.CustomResourceDefinition) field.ErrorList {
			return apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), in)
		})
	},
	"leaderworkerset.x-k8s.io/v1/LeaderWorkerSet": validateLWSTemplates,
}

// generateJobSelector does what the Job strategy does on create when the selector is not
// manual: select the pods by the Job's (here: placeholder) UID.
func generateJobSelector(job *batch.Job) {
	if job.Spec.ManualSelector != nil && *job.Spec.ManualSelector {
		return
	}
	const uid = "00000000-0000-0000-0000-000000000000"
	if job.Spec.Template.Labels == nil {
		job.Spec.Template.Labels = map[string]string{}
	}
	job.UID = uid
	for _, key := range []string{batch.ControllerUidLabel, batch.LegacyControllerUidLabel} {
		job.Spec.Template.Labels[key] = uid
	}
	for _, key := range []string{batch.JobNameLabel, batch.LegacyJobNameLabel} {
		job.Spec.Template.Labels[key] = job.Name
	}
	job.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batch.LegacyControllerUidLabel: uid}}
}

func validate(doc []byte) result {
	var meta typeMeta
	if err := json.Unmarshal(doc, &meta); err != nil {
		return result{Errors: []string{err.Error()}}
	}
	res := result{Kind: meta.Kind, Name: meta.Metadata.Name, Errors: []string{}}
	key := meta.APIVersion + "/" + meta.Kind
	run, ok := validators[key]
	if !ok {
		res.Errors = append(res.Errors, fmt.Sprintf("unsupported kind %s", key))
		return res
	}
	res.Errors = append(res.Errors, run(doc)...)
	return res
}

// validateLWSTemplates checks a LeaderWorkerSet's pod templates as core/v1 PodTemplateSpecs
// (the rest of the object is the CRD's business: crank beta validate checks it).
func validateLWSTemplates(doc []byte) []string {
	var lws struct {
		Spec struct {
			LeaderWorkerTemplate map[string]json.RawMessage `json:"leaderWorkerTemplate"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(doc, &lws); err != nil {
		return []string{err.Error()}
	}
	out := []string{}
	for _, name := range []string{"leaderTemplate", "workerTemplate"} {
		raw, ok := lws.Spec.LeaderWorkerTemplate[name]
		if !ok {
			continue
		}
		var v corev1.PodTemplate
		var in core.PodTemplate
		if err := decodeStrict(raw, &v.Template); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if err := internal(&v, &in); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		opts := podutil.GetValidationOptionsFromPodTemplate(&in.Template, nil)
		path := field.NewPath("spec", "leaderWorkerTemplate", name)
		for _, e := range corevalidation.ValidatePodTemplateSpec(&in.Template, path, opts) {
			out = append(out, e.Error())
		}
	}
	return out
}

func documents(r io.Reader) ([][]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out [][]byte
	for {
		chunk, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(chunk)) == 0 {
			continue
		}
		doc, err := yaml.YAMLToJSON(chunk)
		if err != nil {
			return nil, err
		}
		if string(doc) == "null" {
			continue
		}
		out = append(out, doc)
	}
}

func init() {
	apiextensionsinstall.Install(legacyscheme.Scheme)
}

func main() {
	var docs [][]byte
	inputs := os.Args[1:]
	if len(inputs) == 0 {
		inputs = []string{"-"}
	}
	for _, name := range inputs {
		var r io.Reader = os.Stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			defer f.Close()
			r = f
		}
		more, err := documents(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(2)
		}
		docs = append(docs, more...)
	}
	failed := false
	enc := json.NewEncoder(os.Stdout)
	for _, doc := range docs {
		res := validate(doc)
		if len(res.Errors) > 0 {
			failed = true
		}
		_ = enc.Encode(res)
	}
	if failed {
		os.Exit(1)
	}
}
