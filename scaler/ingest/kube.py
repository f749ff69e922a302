"""Kubernetes API client construction (in-cluster, else kubeconfig). Built once, passed in."""

from __future__ import annotations

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config


class NoKubeAPI(RuntimeError):
    """The config needs the Kubernetes API and no credentials for it were found."""


def make_api_client() -> k8s_client.ApiClient:
    """In a pod: the ServiceAccount token; elsewhere: the current kubeconfig context."""
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException as in_cluster:
        try:
            k8s_config.load_kube_config()
        except (k8s_config.ConfigException, OSError) as kubeconfig:
            raise NoKubeAPI(
                "the configuration reads or writes the Kubernetes API (pool.capacity.nodes, "
                "targets.kubernetes, server.hpaCheck, server.stateConfigMap or "
                "research[].queue.secret) but no "
                f"credentials were found: not in a pod ({in_cluster}) and no usable "
                f"kubeconfig ({kubeconfig}); set KUBECONFIG, or run in the cluster"
            ) from None
    return k8s_client.ApiClient()
