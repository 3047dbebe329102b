"""Configuration: mm2.properties read, validated and translated once, at the edge."""
