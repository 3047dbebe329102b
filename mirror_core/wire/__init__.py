"""The Kafka wire protocol, spoken by mirror_core itself: the groundwork of copying whole record batches.

librdkafka hands records to Python one at a time and takes them back one at a time; at 2,000 partitions
that per-record cost is what holds a flow (README "Scale"). Copying the source's record batches as they are
needs a client of our own: ``codec`` (the protocol's primitive types), ``records`` (record batch v2: split,
filter, restamp), ``sasl`` (the PLAIN, SCRAM and OAUTHBEARER exchanges), ``oauth`` (OIDC tokens) and
``connection`` (one broker connection: TLS and SASL from the cluster's librdkafka settings, version
negotiation). It imports only the configuration."""
