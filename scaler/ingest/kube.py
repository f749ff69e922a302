"""Kubernetes API client construction (in-cluster, else kubeconfig). Built once, passed in."""

from __future__ import annotations

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config


def make_api_client() -> k8s_client.ApiClient:
    """In a pod: the ServiceAccount token; elsewhere: the current kubeconfig context."""
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()
    return k8s_client.ApiClient()
