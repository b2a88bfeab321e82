"""The incident generator and scorer behind ``bench/sre_gen.py`` (issue 35, sections 5 and 6).

``_model``: the records (an entity, an incident's ground truth); ``_cluster``: a
Kubernetes cluster built object by object and written in the ``kubectl cluster-info dump
--output-directory`` layout; ``_flavour``: cloud flavours and runtime log styles; ``_faults``
and ``_faults_sched``: the fault classes; ``_distract``: distractors; ``_compose``: a fault
class x a flavour x a log style x distractors, deterministic for a seed; ``_score``: the
ITBench-AA style scorer; ``_run``: incidents through the real runtime, and the scale case.

The generator is written from Kubernetes' own message shapes (its sources and docs), not
from the investigator's detectors: it imports nothing of ``loopkernel_apps.sre``.
"""
